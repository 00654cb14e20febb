"""SessionRegistry remembers why it ended a session (for that client's next request, so the page can
say "ended" and why), but not sessions a client ended itself, and only the last few."""

import pytest
from aiortc import RTCSessionDescription

from streamer.realtime import session_registry
from streamer.realtime.metrics import DaemonMetrics
from streamer.realtime.peer_session import EndedCallback
from streamer.realtime.session_registry import SessionRegistry


class _Session:
    """What the registry calls on a session: accept the offer, close."""

    def __init__(self, session_id: str, on_ended: EndedCallback) -> None:
        self.session_id = session_id
        self.on_ended = on_ended
        self.closed = False

    async def accept_offer(self, offer: RTCSessionDescription) -> RTCSessionDescription:
        return RTCSessionDescription(sdp="v=0\r\n", type="answer")

    async def close(self) -> None:
        self.closed = True


def _registry() -> tuple[SessionRegistry, dict[str, _Session]]:
    made: dict[str, _Session] = {}

    def create(session_id: str, on_ended: EndedCallback) -> _Session:
        made[session_id] = _Session(session_id, on_ended)
        return made[session_id]

    return SessionRegistry(8, create, DaemonMetrics()), made  # type: ignore[arg-type]


OFFER = RTCSessionDescription(sdp="v=0\r\n", type="offer")


async def test_a_session_the_daemon_ends_leaves_its_reason() -> None:
    registry, made = _registry()
    session, _ = await registry.open(OFFER)
    registry.report_ended(session.session_id, "frames keep failing: engine 'inswapper' is not loaded")
    await registry.close()
    assert made[session.session_id].closed
    assert registry.get(session.session_id) is None
    assert (
        registry.ended_reason(session.session_id) == "frames keep failing: engine 'inswapper' is not loaded"
    )


async def test_a_session_the_daemon_reaps_leaves_its_reason() -> None:
    registry, _ = _registry()
    session, _ = await registry.open(OFFER)
    assert await registry.end(session.session_id, "idle: no video for 5.0 s")
    assert registry.ended_reason(session.session_id) == "idle: no video for 5.0 s"


async def test_a_session_its_client_ends_leaves_none() -> None:
    registry, _ = _registry()
    session, _ = await registry.open(OFFER)
    assert await registry.end(session.session_id)
    assert registry.ended_reason(session.session_id) is None
    assert registry.ended_reason("never-had-it") is None


async def test_only_the_last_reasons_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_registry, "ENDED_REASONS_KEPT", 2)
    registry, _ = _registry()
    ids = []
    for number in range(3):
        session, _ = await registry.open(OFFER)
        ids.append(session.session_id)
        registry.report_ended(session.session_id, f"reason {number}")
    assert [registry.ended_reason(i) for i in ids] == [None, "reason 1", "reason 2"]
    await registry.close()
