"""`run_stream.py bench`: per-stage CPU timings of the real pipeline on a moving 640x480 face.

`--live` (loopback WebRTC glass-to-glass), `--whip` (WHIP publish -> WHEP receive), `--room` (the Janus
room path against a direct call) and `--soak` (sessions joining and leaving) live in their own modules; this one measures the frame pipeline alone, with the same
cadence settings the daemon uses.
"""

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.clients.frames import (
    SOURCE_PHOTO,
    TARGET_PHOTO,
    face_size_from_args,
    face_size_label,
    machine_description,
    media_dir_from_args,
    panning_face_frames,
)
from gpu_ops.errors import InvalidInputError
from models.face import Frame
from models.model_files import resolve_models_dir
from streamer.pipeline.config_args import config_from_args
from streamer.pipeline.frame_pipeline import Embedding, FrameJob, FramePipeline
from streamer.pipeline.image_input import read_image_file
from streamer.pipeline.pipeline_settings import PipelineConfig, SwapSettings
from streamer.pipeline.stage_timer import StageTimer

logger = logging.getLogger(__name__)


class TimedCalls:
    """Wraps one method of a model object so each call lands in a StageTimer stage."""

    def __init__(self, wrapped: Any, method: str, timer: StageTimer, stage: str) -> None:
        self._wrapped = wrapped
        self._method: Callable[..., Any] = getattr(wrapped, method)
        self._name = method
        self._timer = timer
        self._stage = stage

    def __getattr__(self, name: str) -> Any:
        if name == self._name:
            return self._timed
        return getattr(self._wrapped, name)

    def _timed(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self._method(*args, **kwargs)
        finally:
            self._timer.record(self._stage, time.perf_counter() - started)


def reference_from_args(pipeline: FramePipeline, args: argparse.Namespace) -> Embedding | None:
    """`--reference-face`'s identity for `--face-selector reference` (the embedder's cost is then measured)."""
    if getattr(args, "face_selector", "many") != "reference":
        return None
    if not getattr(args, "reference_face", None):
        raise InvalidInputError("--face-selector reference needs --reference-face IMAGE")
    return pipeline.reference_embedding(read_image_file(Path(args.reference_face)))


def measure_pipeline(
    pipeline: FramePipeline, frames: list[Frame], source_photo: Frame, args: argparse.Namespace
) -> dict[str, Any]:
    timer = StageTimer()
    pipeline.detector = TimedCalls(pipeline.detector, "detect", timer, "detect")  # type: ignore[assignment]
    pipeline.landmarker = TimedCalls(pipeline.landmarker, "detect_batch", timer, "landmarks")  # type: ignore[assignment]
    settings = config_from_args(SwapSettings, args)
    source = pipeline.prepare_source(source_photo, settings)
    engine = pipeline.engine_for(settings)
    stream = pipeline.new_stream(reference_embedding=reference_from_args(pipeline, args))
    for frame in frames[:10]:  # warm-up: ORT's first runs allocate
        pipeline.process(FrameJob(frame.copy(), stream, source, settings))
    timer.reset()
    pipeline.timer.reset()
    engine_timer = getattr(engine, "timer", None)
    once_per_source = []  # the engine's work per source photo (mesh: texture, masks, skin fill) is not per frame
    if isinstance(engine_timer, StageTimer):
        once_per_source = [s for s in engine_timer.summary() if s.stage == "source"]
        engine_timer.reset()
    started = time.perf_counter()
    for frame in frames:
        pipeline.process(FrameJob(frame.copy(), stream, source, settings))
    elapsed = time.perf_counter() - started
    stages = {s.stage: s for s in timer.summary()}
    stages.update({s.stage: s for s in pipeline.timer.summary() if s.stage in ("swap", "total")})
    if isinstance(engine_timer, StageTimer):
        stages.update({s.stage: s for s in engine_timer.summary() + once_per_source})
    return {
        "engine": engine.name,
        "frames": len(frames),
        "fps": len(frames) / elapsed,
        "stages": {name: vars(summary) for name, summary in stages.items()},
    }


BATCHING_MODES = ("batched", "one call each")


def measure_batching(
    pipeline: FramePipeline, frames: list[Frame], source_photo: Frame, args: argparse.Namespace
) -> dict[str, Any]:
    """Per-frame ms of `args.streams` streams through one `process_batch` per step vs one call per
    stream, alternating the two modes `args.rounds` times so a noisy machine hits both alike."""
    settings = config_from_args(SwapSettings, args)
    source = pipeline.prepare_source(source_photo, settings)
    count = args.streams
    per_mode: dict[str, list[float]] = {mode: [] for mode in BATCHING_MODES}
    for _ in range(args.rounds):
        for mode in BATCHING_MODES:
            reference = reference_from_args(pipeline, args)
            streams = [pipeline.new_stream(reference_embedding=reference) for _ in range(count)]

            def step(index: int, mode: str = mode, streams: list[Any] = streams) -> None:
                jobs = [
                    FrameJob(frames[(index + offset) % len(frames)].copy(), stream, source, settings)
                    for offset, stream in enumerate(streams)
                ]
                if mode == "batched":
                    pipeline.process_batch(jobs)
                else:
                    for job in jobs:
                        pipeline.process_batch([job])

            for index in range(6):  # warm-up: trackers lock on, ORT sees the batch shapes
                step(index)
            started = time.perf_counter()
            for index in range(len(frames)):
                step(index)
            per_mode[mode].append((time.perf_counter() - started) / (len(frames) * count) * 1000.0)
    return {"streams": count, "ms_per_frame": per_mode}


def run(args: argparse.Namespace) -> int:
    if args.live and (
        getattr(args, "loss", 0.0) or getattr(args, "cut", 0.0) or getattr(args, "cap_kbps", None)
    ):
        from bench.network_bench import run_network

        return run_network(args)
    if args.live:
        from bench.live_bench import run_live

        return run_live(args)
    if getattr(args, "whip", False):
        from bench.whip_bench import run_whip

        return run_whip(args)
    if getattr(args, "room", False):
        from bench.room_bench import run_room_bench

        return run_room_bench(args)
    if getattr(args, "gpu", False):
        from bench.gpu_bench import run_gpu_bench

        return run_gpu_bench(args)
    if args.soak:
        from bench.soak_bench import run_soak

        return run_soak(args)
    media = media_dir_from_args(args)
    pipeline = FramePipeline.load(resolve_models_dir(args.models_dir), config_from_args(PipelineConfig, args))
    face_share = face_size_from_args(args)
    frames = panning_face_frames(
        read_image_file(media / TARGET_PHOTO), args.width, args.height, args.frames, face_share
    )
    if args.streams > 1:
        return _report_batching(
            measure_batching(pipeline, frames, read_image_file(media / SOURCE_PHOTO), args), args
        )
    result = measure_pipeline(pipeline, frames, read_image_file(media / SOURCE_PHOTO), args)
    result.update(
        machine=machine_description(),
        size=f"{args.width}x{args.height}",
        face_share=round(face_share, 4),
        detect_every=pipeline.config.detect_every,
        detection_width=pipeline.config.detection_width,
    )
    header = (
        f"engine {result['engine']}  {result['size']}  1 face, {face_size_label(face_share)}  detection when the mesh is unsure, at least "
        f"every {result['detect_every']} frames, at {result['detection_width']} px wide  {result['frames']} frames"
    )
    lines = [
        header,
        f"{'stage':<12}{'calls':>7}{'mean ms':>10}{'p50 ms':>9}{'p95 ms':>9}",
    ]
    for name, stage in result["stages"].items():
        lines.append(
            f"{name:<12}{stage['count']:>7}{stage['mean_ms']:>10.2f}{stage['p50_ms']:>9.2f}{stage['p95_ms']:>9.2f}"
        )
    lines.append(f"throughput: {result['fps']:.1f} frames/s")
    sys.stdout.write("\n".join(lines) + "\n")
    if getattr(args, "output", None):
        Path(args.output).write_text(json.dumps(result, indent=2))
    return 0


def _report_batching(result: dict[str, Any], args: argparse.Namespace) -> int:
    result.update(machine=machine_description(), size=f"{args.width}x{args.height}")
    batched, alone = (result["ms_per_frame"][mode] for mode in BATCHING_MODES)
    saved = 1.0 - sum(batched) / sum(alone)
    lines = [
        f"{result['streams']} streams  {result['size']}  ms per frame, {args.rounds} alternating rounds",
        f"batched (one process_batch per step): {', '.join(f'{value:.1f}' for value in batched)}",
        f"one call each:                       {', '.join(f'{value:.1f}' for value in alone)}",
        f"saved by batching: {saved * 100:.0f} %",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    if getattr(args, "output", None):
        Path(args.output).write_text(json.dumps(result, indent=2))
    return 0
