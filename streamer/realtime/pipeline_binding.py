"""What the daemon needs from a frame pipeline, as an explicit binding.

The daemon (worker thread, sessions, REST) works with any pipeline that has the `FramePipeline` shape;
`serve` binds the real one, tests bind a fake. The job type, the settings rules and the one decision
"does this stream's frame get swapped" (`wants_swap`) travel with the pipeline, so nothing in the daemon
imports model code, reads fields of the opaque settings, or branches on which pipeline runs.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from models.face import Frame
from streamer.pipeline.capabilities import Capabilities

Settings = Any  # the pipeline's frozen SwapSettings dataclass
StreamState = Any  # the pipeline's per-stream tracking state
SourceHandle = Any  # the pipeline's prepared source identity


class SwapPipeline(Protocol):
    """The `streamer.pipeline.frame_pipeline.FramePipeline` surface the daemon uses (all blocking)."""

    def prepare_source(self, image: Frame, settings: Settings) -> SourceHandle: ...

    def new_stream(self) -> StreamState: ...

    def set_reference(self, stream: StreamState, image: Frame | None) -> None: ...

    def process_batch(self, jobs: Sequence[Any]) -> list[Frame | None]:
        """Each job's swapped frame, or None where the pipeline left the frame untouched (no face, or a
        job it does not swap): the daemon then sends the decoded frame as it came."""
        ...

    def describe(self) -> dict[str, str]: ...

    def capabilities(self) -> Capabilities:
        """The engines and optional features this pipeline runs, and why not where it cannot (the page
        offers only what works; a settings change asking for the rest is refused)."""
        ...


@dataclass(frozen=True)
class BatchPhases:
    """A pipeline's `process_batch` as two halves: `track` (detection, tracking, landmarks: each job's
    faces) and `swap` (what `track` gave -> each job's swapped frame or None). The worker may run
    `track` of one batch on its thread while `swap` of the previous batch runs on another; `track`
    touches the streams' tracking state only, `swap` their swap state only."""

    track: Callable[[Sequence[Any]], list[Any]]
    swap: Callable[[Sequence[Any]], list[Frame | None]]


MakeJob = Callable[..., Any]  # keyword-only: frame, stream, source, settings, timestamp -> FrameJob
UpdateSettings = Callable[..., Settings]  # (settings, **changes) -> new settings; ValueError on bad input
WantsSwap = Callable[[SourceHandle | None, Settings], bool]  # (source, settings): frames go to the worker


@dataclass(frozen=True)
class PipelineBinding:
    """A loaded pipeline plus its job constructor, default settings, validated-update function and the
    rule for which frames it swaps (the session asks it before handing a frame to the worker; the pipeline
    applies the same rule to every job), and, where the pipeline has them, its two batch phases."""

    pipeline: SwapPipeline
    make_job: MakeJob
    default_settings: Settings
    update_settings: UpdateSettings
    wants_swap: WantsSwap
    phases: BatchPhases | None = None  # None: the worker runs `process_batch` whole, on one thread
