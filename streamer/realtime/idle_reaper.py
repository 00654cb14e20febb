"""Closes sessions that stopped receiving video: a peer that vanished without a goodbye, or one that
was answered but never connected, must not hold a session slot, a worker lane and its buffers forever.

A session's reader also ends itself when video stops, but only once its track has arrived; the reaper
sweeps every session on a timer, so it also catches offers that never turned into a connection. The
clock is injected and `sweep()` is public, so tests drive it without sleeping.

Silence is not always a gone peer: a Wi-Fi hiccup or a train tunnel cuts the path for a few seconds
while the peer waits. While a session is in a network gap (nothing at all heard from its peer, ICE up,
consent fresh, its host not refusing our datagrams; and for an idle timeout after the path is back:
streamer/transport/path_liveness.py) it gets `network_gap_timeout_s` (15 s by default, at least the idle
timeout) instead of the idle timeout. A peer that is gone (ICE failed or closed, port unreachable,
consent expired), or one that is reachable and simply sends no video, gets the idle timeout.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

logger = logging.getLogger(__name__)

# how long an answered call may take to send its first frame: ICE + DTLS + the first keyframe, on a
# slow network (the session's own reader and the reaper both wait this long)
FIRST_FRAME_TIMEOUT_S = 15.0
# how long a session whose peer is still there (a network gap, not a gone peer) may go without video
NETWORK_GAP_TIMEOUT_S = 15.0


class WatchedSession(Protocol):
    """What the reaper reads of a session: its id, its count of frames received so far, and whether it
    is in a network gap (its path silent, or just back, while ICE is up). The reaper notes when that count last changed (first sighting counts as
    activity), so sessions need no clock."""

    @property
    def session_id(self) -> str: ...

    @property
    def frames_in(self) -> int: ...

    def in_network_gap(self) -> bool: ...


ListSessions = Callable[[], Sequence[WatchedSession]]
EndSession = Callable[[str, str], Awaitable[object]]  # (session_id, reason)


class IdleReaper:
    """Every `interval_s`, ends sessions idle for longer than `idle_timeout_s` (before their first frame,
    `first_frame_timeout_s`; while their path is alive, `network_gap_timeout_s`). `start()` / idempotent
    `close()`; `sweep()` runs one pass."""

    def __init__(
        self,
        list_sessions: ListSessions,
        end_session: EndSession,
        *,
        idle_timeout_s: float,
        first_frame_timeout_s: float = FIRST_FRAME_TIMEOUT_S,
        network_gap_timeout_s: float = NETWORK_GAP_TIMEOUT_S,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if idle_timeout_s <= 0:
            raise ValueError(f"idle timeout must be positive, got {idle_timeout_s}")
        self._list_sessions = list_sessions
        self._end_session = end_session
        self.idle_timeout_s = idle_timeout_s
        self.first_frame_timeout_s = max(first_frame_timeout_s, idle_timeout_s)
        self.network_gap_timeout_s = max(network_gap_timeout_s, idle_timeout_s)
        self.interval_s = interval_s if interval_s is not None else min(1.0, idle_timeout_s / 4)
        self._clock = clock
        self._seen: dict[str, tuple[int, float]] = {}  # session id -> (frames_in, when it last changed)
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.reaped = 0

    def idle_sessions(self) -> list[tuple[str, str]]:
        """(session_id, reason) of every session over its timeout now."""
        now = self._clock()
        idle = []
        seen: dict[str, tuple[int, float]] = {}
        for session in self._list_sessions():
            frames_in, changed_at = self._seen.get(session.session_id, (-1, now))
            if frames_in != session.frames_in:
                changed_at = now
            seen[session.session_id] = (session.frames_in, changed_at)
            limit = self.idle_timeout_s if session.frames_in else self.first_frame_timeout_s
            silent_s = now - changed_at
            in_gap_grace = session.frames_in and silent_s <= self.network_gap_timeout_s
            if silent_s > limit and in_gap_grace and session.in_network_gap():
                continue  # a network gap: the peer is still there, give the path time to return
            if silent_s > limit:
                what = "no video" if session.frames_in else "no first frame"
                idle.append((session.session_id, f"idle: {what} for {silent_s:.1f} s"))
        self._seen = seen  # sessions gone since the last sweep are forgotten
        return idle

    async def sweep(self) -> list[str]:
        """End every idle session now; returns their ids."""
        ended = []
        for session_id, reason in self.idle_sessions():
            logger.info(
                "session %s: %s; closing it",
                session_id,
                reason,
                extra={"session_id": session_id, "event": "idle_reaped"},
            )
            await self._end_session(session_id, reason)
            self.reaped += 1
            ended.append(session_id)
        return ended

    def start(self) -> None:
        if self._task is not None or self._closed:
            raise RuntimeError("IdleReaper.start() called twice or after close()")
        self._task = asyncio.create_task(self._run(), name="idle-reaper")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.sweep()
            except Exception:  # a bug in one sweep must not stop reaping: log it, sweep again
                logger.exception("idle sweep failed")

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
