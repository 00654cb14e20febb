"""An outbound media track: a newest-wins mailbox in front of aiortc's encoder. A session's video (swapped
frames, or frames passed through) goes out through one with a single slot. Frames keep the input's pts/time_base (so the encoder's RTP timestamps follow the camera's clock) and are
never reordered. When the encoder falls behind, a frame waiting for it is replaced by a newer one (and
counted as dropped): latency stays one encode long, it never queues behind the encoder. Audio relayed to
viewers uses the same track (kind "audio") with a few slots: 20 ms frames come in bursts and each is sound.

Frames are pushed from the event loop (the worker hands results over with call_soon_threadsafe), each
with the time it left its decoder, so `on_sent` can say how old it was when the encoder took it.
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame, VideoFrame

logger = logging.getLogger(__name__)

MediaFrame = VideoFrame | AudioFrame
OnSent = Callable[[MediaFrame, float], None]  # (frame, seconds since it left the decoder)


class OutboundTrack(MediaStreamTrack):
    """`push()` frames in, aiortc's sender `recv()`s them; `dropped` counts frames never sent and
    `max_waiting` the most frames that ever waited for the encoder at once (at most `slots`)."""

    def __init__(
        self, on_sent: OnSent | None = None, *, slots: int = 1, kind: Literal["video", "audio"] = "video"
    ) -> None:
        super().__init__()
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.kind = kind
        self._frames: deque[tuple[MediaFrame, float]] = deque()
        self._slots = slots
        self._ready = asyncio.Event()
        self._last_pts: int | None = None
        self._on_sent = on_sent
        self.dropped = 0
        self.sent = 0
        self.max_waiting = 0

    def push(self, frame: MediaFrame, born_at: float | None = None) -> bool:
        """Offer `frame` (read from its decoder at `born_at`, time.monotonic); False when it is dropped
        because a newer frame was already offered (late worker result after a newer passthrough frame)."""
        if self.readyState != "live":
            return False
        if frame.pts is not None and self._last_pts is not None and frame.pts <= self._last_pts:
            self.dropped += 1
            return False
        if len(self._frames) >= self._slots:
            self._frames.popleft()
            self.dropped += 1  # the encoder never took it: the newer frame wins
        self._frames.append((frame, time.monotonic() if born_at is None else born_at))
        self.max_waiting = max(self.max_waiting, len(self._frames))
        self._last_pts = frame.pts
        self._ready.set()
        return True

    async def recv(self) -> MediaFrame:
        while not self._frames:
            if self.readyState != "live":
                raise MediaStreamError
            self._ready.clear()
            await self._ready.wait()
        frame, born_at = self._frames.popleft()
        self.sent += 1
        if self._on_sent is not None:
            self._on_sent(frame, time.monotonic() - born_at)
        return frame

    def stop(self) -> None:
        super().stop()
        self._frames.clear()
        self._ready.set()  # wake a waiting recv() so it raises MediaStreamError
