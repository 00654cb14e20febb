"""The outbound video track of one session: a queue of at most 2 frames, oldest dropped, frames keep
the input's pts/time_base (so the encoder's RTP timestamps follow the camera's clock), never reordered.

Frames are pushed from the event loop (the worker hands results over with call_soon_threadsafe).
"""

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import VideoFrame

logger = logging.getLogger(__name__)

QUEUE_LIMIT = 2


class SwappedTrack(MediaStreamTrack):
    """`push()` frames in, aiortc's sender `recv()`s them; `dropped` counts frames never sent."""

    kind = "video"

    def __init__(self, on_sent: Callable[[VideoFrame], None] | None = None) -> None:
        super().__init__()
        self._frames: deque[VideoFrame] = deque()
        self._ready = asyncio.Event()
        self._last_pts: int | None = None
        self._on_sent = on_sent
        self.dropped = 0
        self.sent = 0

    def push(self, frame: VideoFrame) -> bool:
        """Queue `frame`; returns False (and counts a drop) when it is older than one already queued."""
        if self.readyState != "live":
            return False
        if frame.pts is not None and self._last_pts is not None and frame.pts <= self._last_pts:
            self.dropped += 1  # a late worker result after a newer passthrough frame: keep order
            return False
        if len(self._frames) >= QUEUE_LIMIT:
            self._frames.popleft()
            self.dropped += 1
        self._frames.append(frame)
        self._last_pts = frame.pts
        self._ready.set()
        return True

    async def recv(self) -> VideoFrame:
        while not self._frames:
            if self.readyState != "live":
                raise MediaStreamError
            self._ready.clear()
            await self._ready.wait()
        frame = self._frames.popleft()
        self.sent += 1
        if self._on_sent is not None:
            self._on_sent(frame)
        return frame

    def stop(self) -> None:
        super().stop()
        self._frames.clear()
        self._ready.set()  # wake a waiting recv() so it raises MediaStreamError
