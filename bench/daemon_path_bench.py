"""`bench --gpu`'s `daemon_mesh` workload: the daemon's own frame path, real models, timed on a backend.

What the worker does per batch, nothing synthetic: decoded yuv420p frames through the frame conversion
the daemon would choose (`--frame-path auto`: planes up once / colour kernels / I420 down once on the
GPU backend, libswscale on the CPU), `FramePipeline.process_batch` with the real detector (every 2nd
frame), face mesh and mesh engine, one stream state per session. Frames are the benches' panning face
(`bench_frames`), sessions are independent streams of it. The numbers complement the synthetic
workloads of `gpu_bench`, which leave detection and landmarks out.
"""

from dataclasses import replace
from pathlib import Path
from typing import Any

from av import VideoFrame

from bench.clients.frames import SOURCE_PHOTO, TARGET_PHOTO, panning_face_frames
from streamer.pipeline.compute_backend import ComputeBackend
from streamer.pipeline.frame_pipeline import FrameJob, FramePipeline, StreamState
from streamer.pipeline.image_input import read_image_file
from streamer.pipeline.pipeline_settings import PipelineConfig, SwapSettings
from streamer.pipeline.stage_timer import StageClock, StageTimer
from streamer.realtime.frame_conversion import choose_frame_conversion

PANNING_FRAMES = 30


class DaemonPath:
    """The worker's path over a loaded pipeline; `run_batch` takes one frame per session."""

    def __init__(self, pipeline: FramePipeline, media_dir: Path) -> None:
        self.pipeline = pipeline
        self.backend: ComputeBackend | None = pipeline.backend
        self.conversion = choose_frame_conversion("auto", self.backend)
        self.settings = SwapSettings(engine="mesh")
        self.source = pipeline.prepare_source(read_image_file(media_dir / SOURCE_PHOTO), self.settings)
        self.target_photo = read_image_file(media_dir / TARGET_PHOTO)
        self.streams: dict[int, StreamState] = {}

    @classmethod
    def load(cls, models_dir: Path, media_dir: Path, execution_provider: Any) -> "DaemonPath":
        config = replace(PipelineConfig(), execution_provider=execution_provider, engine="mesh")
        return cls(FramePipeline.load(models_dir, config), media_dir)

    def make_inputs(self, size: tuple[int, int], count: int) -> list[VideoFrame]:
        """Decoder-like frames (yuv420p, padded planes) of the panning face at `size`."""
        width, height = size
        frames = panning_face_frames(self.target_photo, width, height, max(count, PANNING_FRAMES))
        return [VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p") for rgb in frames]

    def sync(self) -> None:
        if self.backend is not None and self.backend.on_gpu:
            self.backend.stream.synchronize()

    def run_batch(self, inputs: list[VideoFrame], timer: StageTimer | None = None) -> list[VideoFrame]:
        """Frame i belongs to session i: convert in, one pipeline batch, convert out (as the worker)."""
        clock = StageClock(timer, self.sync)
        with self.conversion.activate():
            rgb = [self.conversion.to_pipeline(str(index), frame) for index, frame in enumerate(inputs)]
            clock("convert_in")
            jobs = [
                FrameJob(frame, self._stream(index), self.source, self.settings)
                for index, frame in enumerate(rgb)
            ]
            outputs = self.pipeline.process_batch(jobs)
            clock("pipeline")
            converted = [  # untouched frames (None) go out as they came; swapped ones as the decoded
                # planes with what the swap changed merged in: as the worker sends them
                frame
                if output is None
                else self.conversion.to_video_frame(str(index), output, frame, source=rgb[index])
                for index, (output, frame) in enumerate(zip(outputs, inputs))
            ]
            clock("convert_out")
        return converted

    def _stream(self, session: int) -> StreamState:
        stream = self.streams.get(session)
        if stream is None:
            stream = self.streams[session] = self.pipeline.new_stream()
        return stream
