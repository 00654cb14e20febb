"""What sending a swapped frame back to I420 costs the worker: the whole frame through libswscale (the
host path until issue 20) against the decoded planes with only the changed boxes converted and merged
(`HostFrameConversion.to_video_frame(..., source=...)`), in alternating turns on the same frames (this
machine's speed drifts, so the two sides must take turns).

The frames are the benches' panning face at the given size and face share, swapped by the real mesh
pipeline once up front; prints per size the median and minimum ms of each way and the boxes' share of
the frame.

    python scripts/bench_convert_out.py --models-dir MODELS_DIR --media-dir PHOTOS_DIR [--face-size 0.35]
"""

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from av import VideoFrame

from bench.clients.frames import SOURCE_PHOTO, TARGET_PHOTO, machine_description, panning_face_frames
from gpu_ops.i420_patch import changed_boxes
from streamer.pipeline.frame_pipeline import FrameJob, FramePipeline
from streamer.pipeline.image_input import read_image_file
from streamer.pipeline.pipeline_settings import PipelineConfig, SwapSettings
from streamer.realtime.frame_conversion import HostFrameConversion, Swscale

SIZES = ((1280, 720), (1920, 1080))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--media-dir", type=Path, required=True)
    parser.add_argument("--face-size", type=float, default=0.35)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    pipeline = FramePipeline.load(args.models_dir, PipelineConfig())
    settings = SwapSettings()
    source = pipeline.prepare_source(read_image_file(args.media_dir / SOURCE_PHOTO), settings)
    print(f"convert out, face {args.face_size:.0%} of the width, {machine_description()}")
    for width, height in SIZES:
        photos = panning_face_frames(
            read_image_file(args.media_dir / TARGET_PHOTO), width, height, args.frames, args.face_size
        )
        stream, host = pipeline.new_stream(), HostFrameConversion()
        cases = []
        for photo in photos:
            decoded = VideoFrame.from_ndarray(photo, format="rgb24").reformat(format="yuv420p")
            rgb = host.to_pipeline("bench", decoded)
            job = FrameJob(frame=rgb, stream=stream, source=source, settings=settings)
            output = pipeline.process_batch([job])[0]
            if output is not None:
                cases.append((decoded, rgb, output))
        if not cases:
            print(f"{width}x{height}: no frame was swapped")
            continue
        swscale = Swscale()
        ways = {
            "whole frame (libswscale)": lambda d, r, o, swscale=swscale: swscale.to_yuv420p(o, d),
            "changed boxes": lambda d, r, o, host=host: host.to_video_frame("bench", o, d, source=r),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.turns):
            for name, way in ways.items():
                for case in cases:
                    started = time.perf_counter()
                    way(*case)
                    times[name].append((time.perf_counter() - started) * 1000)
        share = statistics.median(
            sum(box.area for box in changed_boxes(rgb, output)) / (width * height) for _, rgb, output in cases
        )
        print(f"{width}x{height}, boxes {share:.0%} of the frame:")
        for name, values in times.items():
            print(f"  {name:<26} p50 {statistics.median(values):6.2f} ms   min {min(values):6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
