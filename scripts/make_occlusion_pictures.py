"""Regenerate docs/images/mesh_target_occlusion.png and mesh_source_beard_zone.png (issue 18).

Target side: a microphone, a phone, a cup, a skin-toned hand and a glasses frame painted in front of a target face
(bench/clients/occluders.py; the hand is found by the hand models, streamer/pipeline/swap_engines/mesh_hands.py),
one row each: painted target | swapped with occlusion off | swapped with it on, the occlusion mask in red
over the last. Source side: a one-sided dark patch on the source's lower cheek (beside the mouth): painted
source | the swap with the beard-zone symmetry rule off | on. Public-domain media only (the official
Obama and Biden portraits, NASA's astronaut portrait).

    python scripts/make_occlusion_pictures.py --models-dir MODELS_DIR --media-dir PHOTOS_DIR
"""

import argparse
import dataclasses
import sys
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.clients.occluders import cup, glasses_frame, hand, lower_cheek_patch, microphone, phone
from models.detector import Detector
from models.face import Frame, TrackedFace
from models.inference import InferenceConfig
from models.landmarks import Landmarker
from models.model_files import ModelStore
from models.registry import get_spec
from streamer.pipeline.face_tracker import analyse_image
from streamer.pipeline.image_input import read_image_file
from streamer.pipeline.swap_engines.base import SwapOptions
from streamer.pipeline.swap_engines.mesh import MeshConfig, MeshEngine, paste_box
from streamer.pipeline.swap_engines.mesh_hands import load_face_hands

PANEL = (150, 177)  # three panels a row stay near 150 KB as PNG


def crop(image: Frame, face: TrackedFace) -> Frame:
    assert face.mesh is not None
    x1, y1, x2, y2 = paste_box(face.mesh, image.shape[1], image.shape[0])
    pad_x, pad_y = (x2 - x1) // 6, (y2 - y1) // 8
    x1, y1 = max(0, x1 - pad_x), max(0, y1 - pad_y)
    x2, y2 = min(image.shape[1], x2 + pad_x), min(image.shape[0], y2 + pad_y)
    return np.asarray(cv2.resize(image[y1:y2, x1:x2], PANEL, interpolation=cv2.INTER_AREA))


def with_mask(image: Frame, engine: MeshEngine, face: TrackedFace) -> Frame:
    """`image` with the engine's last occlusion mask blended in red over the face box."""
    assert face.mesh is not None and engine.last_occlusion is not None
    x1, y1, x2, y2 = paste_box(face.mesh, image.shape[1], image.shape[0])
    mask = cv2.resize(engine.last_occlusion.mask, (x2 - x1, y2 - y1))[..., None] * 0.45
    shown = image.copy().astype(np.float32)
    shown[y1:y2, x1:x2] = shown[y1:y2, x1:x2] * (1 - mask) + np.array([255, 0, 0], np.float32) * mask
    return shown.astype(np.uint8)


def save(path: Path, rows: list[list[Frame]]) -> None:
    grid = np.concatenate([np.concatenate(row, axis=1) for row in rows], axis=0)
    cv2.imwrite(str(path), cv2.cvtColor(grid, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--media-dir", type=Path, required=True)
    parser.add_argument(
        "--out-dir", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "images"
    )
    args = parser.parse_args()
    store = ModelStore(args.models_dir)
    inference = InferenceConfig(intra_op_threads=2)
    detector = Detector(store.session("yunet_n", inference), get_spec("yunet_n"))
    landmarker = Landmarker(store.session("facemesh_468", inference), get_spec("facemesh_468"))
    engine = MeshEngine(
        detector, landmarker, hands=load_face_hands(store, lambda name: store.session(name, inference))
    )
    source = engine.prepare_source(read_image_file(args.media_dir / "fr_biden2.jpg"))
    rows = []
    for target_name, painter in (
        ("fr_obama.jpg", microphone),
        ("skimage_astronaut.png", phone),
        ("fr_biden.jpg", cup),
        ("skimage_astronaut.png", hand),
        ("fr_obama.jpg", glasses_frame),
    ):
        target = read_image_file(args.media_dir / target_name)
        face = analyse_image(detector, landmarker, target)[0]
        assert face.mesh is not None
        painted = painter(target, face.mesh)
        off = engine.swap(painted, [face], source, SwapOptions(occlusion=False))
        on = engine.swap(painted, [face], source, SwapOptions())
        rows.append([crop(painted, face), crop(off, face), crop(with_mask(on, engine, face), face)])
    save(args.out_dir / "mesh_target_occlusion.png", rows)

    rows = []
    beard_off = MeshEngine(
        detector,
        landmarker,
        MeshConfig(source=dataclasses.replace(MeshConfig().source, beard_symmetry=False)),
    )
    target = read_image_file(args.media_dir / "fr_obama2.jpg")
    target_face = analyse_image(detector, landmarker, target)[0]
    for source_name in ("fr_obama.jpg", "fr_biden.jpg"):
        photo = read_image_file(args.media_dir / source_name)
        source_face = analyse_image(detector, landmarker, photo)[0]
        assert source_face.mesh is not None
        patched = lower_cheek_patch(photo, source_face.mesh)
        swaps = [
            configured.swap(target, [target_face], configured.prepare_source(patched), SwapOptions())
            for configured in (beard_off, engine)
        ]
        rows.append([crop(patched, source_face), *(crop(swapped, target_face) for swapped in swaps)])
    save(args.out_dir / "mesh_source_beard_zone.png", rows)

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
