"""One session's seat at the batch worker (`WorkerLane`), and the frames that move through it: as the
session's reader handed it over (`InboundFrame`) and as a batch holds it (`ConvertedFrame`)."""

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from av import VideoFrame

from streamer.realtime.mailbox import FrameMailbox
from streamer.realtime.pipeline_binding import Settings, SourceHandle, StreamState


@dataclass(frozen=True)
class InboundFrame:
    """A decoded frame as it left the reader, and when (time.monotonic) it arrived."""

    video_frame: VideoFrame
    received_at: float

    @property
    def capture_time(self) -> float:
        """When the camera took the frame (s, the sender's clock: RTP time, unwrapped by aiortc), else
        when it arrived: the tracker's smoothing needs the time between the frames it sees, which the
        swap cadence and the mailbox make uneven."""
        frame = self.video_frame
        if frame.pts is None or frame.time_base is None:
            return self.received_at
        return float(frame.pts * frame.time_base)


@dataclass(frozen=True)
class ConvertedFrame:
    """A lane's frame of this batch, with the pipeline's picture of it (RGB, host or device)."""

    lane: "WorkerLane"
    item: InboundFrame
    rgb: Any


Deliver = Callable[[InboundFrame, VideoFrame], None]  # called on the worker thread; must be thread-safe


class WorkerLane:
    """One session's seat at the worker. The loop replaces `source`/`settings` (atomic references)."""

    def __init__(self, session_id: str, stream: StreamState, settings: Settings, deliver: Deliver) -> None:
        self.session_id = session_id
        self.stream = stream
        self.settings = settings
        self.source: SourceHandle | None = None
        self.deliver = deliver
        self.mailbox: FrameMailbox[InboundFrame] = FrameMailbox()
        self.processing_ms: deque[float] = deque(maxlen=120)  # whole-batch time of this lane's frames
        self.failures = 0  # consecutive frames that failed (worker thread only)
        self.batcher_dropped = 0  # frames taken from the mailbox, then replaced in the batcher
