"""What the daemon needs from a frame pipeline, as an explicit binding.

The daemon (worker thread, sessions, REST) works with any pipeline that has the `FramePipeline` shape;
`serve` binds the real one, tests bind a fake. The job type and the settings rules travel with the
pipeline, so nothing in the daemon imports model code or branches on which pipeline runs.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from models.face import Frame

Settings = Any  # the pipeline's frozen SwapSettings dataclass
StreamState = Any  # the pipeline's per-stream tracking state
SourceHandle = Any  # the pipeline's prepared source identity


class SwapPipeline(Protocol):
    """The `streamer.pipeline.frame_pipeline.FramePipeline` surface the daemon uses (all blocking)."""

    def prepare_source(self, image: Frame, settings: Settings) -> SourceHandle: ...

    def new_stream(self) -> StreamState: ...

    def set_reference(self, stream: StreamState, image: Frame | None) -> None: ...

    def process_batch(self, jobs: Sequence[Any]) -> list[Frame]: ...

    def describe(self) -> dict[str, str]: ...


MakeJob = Callable[..., Any]  # keyword-only: frame, stream, source, settings -> FrameJob
UpdateSettings = Callable[..., Settings]  # (settings, **changes) -> new settings; ValueError on bad input


@dataclass(frozen=True)
class PipelineBinding:
    """A loaded pipeline plus its job constructor, default settings and validated-update function."""

    pipeline: SwapPipeline
    make_job: MakeJob
    default_settings: Settings
    update_settings: UpdateSettings
