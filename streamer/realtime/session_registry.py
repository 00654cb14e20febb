"""The daemon's open peer sessions: creation under the session limit, lookup, and ending them, whether
a client asks (DELETE), the peer vanishes (the session reports it) or the daemon shuts down.
"""

import asyncio
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable

from aiortc import RTCSessionDescription

from gpu_ops.errors import LivefuseError
from streamer.realtime.metrics import DaemonMetrics
from streamer.realtime.peer_session import EndedCallback, PeerSession

logger = logging.getLogger(__name__)

SessionFactory = Callable[[str, EndedCallback], PeerSession]
ENDED_REASONS_KEPT = 64  # why the last sessions the daemon ended did end, for their clients' next request


class SessionLimitError(LivefuseError):
    """All session slots are taken; the client should retry later."""


class SessionRegistry:
    """Owns every PeerSession and the tasks that close them; `close()` ends all (idempotent)."""

    def __init__(self, max_sessions: int, create_session: SessionFactory, metrics: DaemonMetrics) -> None:
        self._max_sessions = max_sessions
        self._create_session = create_session
        self._metrics = metrics
        self._sessions: dict[str, PeerSession] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False
        self._ended: OrderedDict[str, str] = OrderedDict()  # session id -> reason, newest last

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str) -> PeerSession | None:
        return self._sessions.get(session_id)

    def sessions(self) -> list[PeerSession]:
        """A snapshot of the open sessions (the idle reaper sweeps it)."""
        return list(self._sessions.values())

    def ended_reason(self, session_id: str) -> str | None:
        """Why the daemon ended this session (its frames kept failing, the peer went away, idle), if it
        did so lately; None for sessions it never had, still has, or that a client ended."""
        return self._ended.get(session_id)

    def report_ended(self, session_id: str, reason: str) -> None:
        """End a session from outside its own callbacks (e.g. its frames keep failing on the worker)."""
        self._on_session_ended(session_id, reason)

    async def open(self, offer: RTCSessionDescription) -> tuple[PeerSession, RTCSessionDescription]:
        """A new session answering `offer`; SessionLimitError when full, ValueError for a bad offer."""
        if self._closed:
            raise SessionLimitError("the daemon is shutting down")
        if len(self._sessions) >= self._max_sessions:
            raise SessionLimitError(f"all {self._max_sessions} session slots are in use")
        session_id = uuid.uuid4().hex[:16]
        session = self._create_session(session_id, self._on_session_ended)
        self._sessions[session_id] = session
        self._metrics.active_sessions.set(len(self._sessions))
        try:
            answer = await session.accept_offer(offer)
        except BaseException:
            await self.end(session_id)
            raise
        return session, answer

    async def end(self, session_id: str, reason: str | None = None) -> bool:
        """Close and forget one session; False when there is no such session. `reason`: the daemon ends
        it on its own (idle, failing), and says so to the client's next request (`ended_reason`)."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        if reason is not None:
            self._remember_ended(session_id, reason)
        self._metrics.active_sessions.set(len(self._sessions))
        await session.close()
        return True

    def _on_session_ended(self, session_id: str, reason: str) -> None:
        # called from the session's own callbacks: close it in a task this registry owns
        if session_id not in self._sessions or self._closed:
            return
        self._remember_ended(session_id, reason)
        task = asyncio.get_running_loop().create_task(
            self._end_reported(session_id), name=f"end-{session_id}"
        )
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _remember_ended(self, session_id: str, reason: str) -> None:
        self._ended[session_id] = reason
        while len(self._ended) > ENDED_REASONS_KEPT:
            self._ended.popitem(last=False)

    async def _end_reported(self, session_id: str) -> None:
        await self.end(session_id)

    async def close(self) -> None:
        self._closed = True
        await asyncio.gather(*(self.end(session_id) for session_id in list(self._sessions)))
        if self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)
