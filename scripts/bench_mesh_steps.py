"""What the mesh engine's issue-12 steps and the issue-18 occlusion mask cost: the same frames swapped
with the steps on and off, in alternating rounds (this machine's speed drifts 15 % and more, so the two sides must take turns).

Per frame: the multi-band blend with its band masks, the rim guard and the per-track smoothing, against
the single feathered blend with no guard and no memory (MeshConfig(blend="feather", rim_guard=None,
smoothing=None)), and the steps without only the target occlusion mask (MeshConfig(occlusion=None), issue
18; with it the hand check, mesh_hands.py, whose palm search runs every few frames, so its cost shows
in the mean per frame, not in the median). Per source: the skin mask
and occluder fill (MeshSourceConfig.skin_mask). 640x480 panning frames of the bench's target photo, one
face, ORT and OpenCV on this CPU, each configuration on one stream for all rounds after an untimed
round (a call's steady state: the track's first-frame work, its skin fit and palm search, is not
counted, the periodic search is); prints medians per round and the differences.

    python scripts/bench_mesh_steps.py --models-dir MODELS_DIR --media-dir PHOTOS_DIR [--rounds 6]
"""

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.clients.frames import SOURCE_PHOTO, TARGET_PHOTO, machine_description, panning_face_frames
from models.detector import Detector
from models.inference import InferenceConfig
from models.landmarks import Landmarker
from models.model_files import ModelStore
from models.registry import get_spec
from streamer.pipeline.face_tracker import analyse_image
from streamer.pipeline.image_input import read_image_file
from streamer.pipeline.swap_engines.base import StreamMemory, SwapOptions
from streamer.pipeline.swap_engines.mesh import MeshConfig, MeshEngine
from streamer.pipeline.swap_engines.mesh_hands import load_face_hands
from streamer.pipeline.swap_engines.mesh_source import build_mesh_source

logger = logging.getLogger("bench_mesh_steps")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--media-dir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--frames", type=int, default=60)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    store = ModelStore(args.models_dir)
    inference = InferenceConfig(intra_op_threads=1)
    detector = Detector(store.session("yunet_n", inference), get_spec("yunet_n"))
    landmarker = Landmarker(store.session("facemesh_468", inference), get_spec("facemesh_468"))
    frames = panning_face_frames(read_image_file(args.media_dir / TARGET_PHOTO), 640, 480, args.frames)
    faces = [analyse_image(detector, landmarker, frame)[:1] for frame in frames]
    photo = read_image_file(args.media_dir / SOURCE_PHOTO)
    default = MeshConfig()
    configs = {
        "on": default,
        "no-occlusion": dataclasses.replace(default, occlusion=None),
        "off": dataclasses.replace(default, blend="feather", rim_guard=None, smoothing=None, occlusion=None),
    }
    hands = load_face_hands(store, lambda name: store.session(name, inference))
    engines = {
        name: MeshEngine(detector, landmarker, config, hands=hands) for name, config in configs.items()
    }
    sources = {name: engine.prepare_source(photo) for name, engine in engines.items()}
    per_frame: dict[str, list[float]] = {name: [] for name in configs}
    mean_frame: dict[str, list[float]] = {name: [] for name in configs}
    # one stream per engine for all rounds, after an untimed round: a call's steady state (the panning
    # loops seamlessly), where the hand check's palm search runs at its cadence, not at every new track
    memories = {name: StreamMemory() for name in engines}
    for name, engine in engines.items():
        for frame, found in zip(frames, faces, strict=True):
            engine.swap(frame, found, sources[name], SwapOptions(memory=memories[name]))
    engines["on"].timer.reset()
    for _ in range(args.rounds):
        for name, engine in engines.items():
            memory, times = memories[name], []
            for frame, found in zip(frames, faces, strict=True):
                started = time.perf_counter()
                engine.swap(frame, found, sources[name], SwapOptions(memory=memory))
                times.append(time.perf_counter() - started)
            per_frame[name].append(float(np.median(times)) * 1000.0)
            mean_frame[name].append(float(np.mean(times)) * 1000.0)
    mesh = engines["on"].source_mesh(photo)
    without_skin = dataclasses.replace(default.source, skin_mask=False)
    per_source: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(args.rounds):
        for name, source_config in (("on", default.source), ("off", without_skin)):
            started = time.perf_counter()
            build_mesh_source(photo, mesh, source_config)
            per_source[name].append((time.perf_counter() - started) * 1000.0)
    added = np.array(per_frame["on"]) - np.array(per_frame["off"])
    occlusion = np.array(per_frame["on"]) - np.array(per_frame["no-occlusion"])
    count, seconds = engines["on"].timer.totals().get("occlusion", (0, 0.0))
    occlusion_step = [seconds / max(count, 1) * 1000.0]
    hand_count, hand_seconds = engines["on"].timer.totals().get("hands", (0, 0.0))
    hand_step = hand_seconds / max(hand_count, 1) * 1000.0
    # the hand search runs every few frames: a median hides it, the mean does not
    occlusion_mean = np.array(mean_frame["on"]) - np.array(mean_frame["no-occlusion"])
    lines = [
        f"{machine_description()}; 640x480, 1 face, {args.frames} frames x {args.rounds} alternating rounds",
        f"swap per face, steps on  (ms, median per round): {', '.join(f'{v:.2f}' for v in per_frame['on'])}",
        f"swap per face, steps off (ms, median per round): {', '.join(f'{v:.2f}' for v in per_frame['off'])}",
        "swap per face, no occlusion (ms, median per round): "
        + ", ".join(f"{v:.2f}" for v in per_frame["no-occlusion"]),
        f"per-frame cost of the steps: {', '.join(f'{v:.2f}' for v in added)}; median {np.median(added):.2f} ms",
        f"of which the occlusion mask: {', '.join(f'{v:.2f}' for v in occlusion)}; median "
        + f"{np.median(occlusion):.2f} ms (its own timer: mean {occlusion_step[0]:.2f} ms)",
        f"occlusion mask with the hand check, mean per frame: {', '.join(f'{v:.2f}' for v in occlusion_mean)}; "
        + f"median {np.median(occlusion_mean):.2f} ms (timers: mask {occlusion_step[0]:.2f} + hands "
        + f"{hand_step:.2f} ms, {'on' if hands is not None else 'no hand models'})",
        "source preparation, skin mask on / off (ms, median): "
        + f"{np.median(per_source['on']):.1f} / {np.median(per_source['off']):.1f}",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
