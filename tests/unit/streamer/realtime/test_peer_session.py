"""PeerSession and SessionRegistry ownership rules: close before start, twice, after failures."""

import asyncio

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from streamer.realtime.batch_worker import BatchWorker
from streamer.realtime.metrics import DaemonMetrics
from streamer.realtime.peer_session import PeerSession
from streamer.realtime.session_registry import SessionLimitError, SessionRegistry
from streamer.realtime.swap_cadence import SwapCadence
from streamer.transport.ice_addresses import restrict_ice_addresses
from tests.fakes_pipeline import FakeSwapSettings, fake_binding


async def _offer() -> RTCSessionDescription:
    restrict_ice_addresses(["127.0.0.1"])
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # aiortc's default asks Google's STUN server
    try:
        pc.addTransceiver("video", direction="sendrecv")
        pc.addTransceiver("audio", direction="sendrecv")
        await pc.setLocalDescription(await pc.createOffer())
        return pc.localDescription
    finally:
        await pc.close()


async def test_close_before_start_and_twice() -> None:
    worker = BatchWorker(fake_binding())
    session = PeerSession("s1", worker, fake_binding(), DaemonMetrics(), SwapCadence(worker.busy_seconds))
    stats = session.stats()
    assert stats["resolution_in"] is None and stats["resolution_out"] is None  # no frame yet: no size
    await session.close()
    await asyncio.gather(session.close(), session.close())
    with pytest.raises(RuntimeError):
        await session.accept_offer(await _offer())


async def test_answer_then_close_frees_the_lane() -> None:
    binding = fake_binding()
    worker = BatchWorker(binding)
    worker.start()
    try:
        session = PeerSession("s1", worker, binding, DaemonMetrics(), SwapCadence(worker.busy_seconds))
        answer = await session.accept_offer(await _offer())
        assert answer.type == "answer" and "m=video" in answer.sdp and "m=audio" in answer.sdp
        assert "a=sendrecv" in answer.sdp
        assert session.update_settings({"mouth_mask": False}) == FakeSwapSettings(mouth_mask=False)
        with pytest.raises(ValueError):
            session.update_settings({"nonsense": 1})
        await session.close()
        assert session.stats()["connection_state"] == "closed"
        assert "s1" not in worker._lanes  # detached: the worker no longer serves it
    finally:
        await worker.close()


async def test_bad_offer_fails_and_session_still_closes() -> None:
    binding = fake_binding()
    worker = BatchWorker(binding)
    worker.start()
    try:
        session = PeerSession("s1", worker, binding, DaemonMetrics(), SwapCadence(worker.busy_seconds))
        with pytest.raises(ValueError):
            await session.accept_offer(RTCSessionDescription(sdp="v=0\r\nnonsense\r\n", type="offer"))
        await session.close()
        await session.close()
    finally:
        await worker.close()


async def test_registry_limit_end_and_reported_end() -> None:
    binding = fake_binding()
    metrics = DaemonMetrics()
    worker = BatchWorker(binding, metrics)
    worker.start()
    ended = asyncio.Event()
    sessions: list[PeerSession] = []

    def create(session_id: str, on_ended):  # type: ignore[no-untyped-def]
        def report(sid: str, reason: str) -> None:
            on_ended(sid, reason)
            ended.set()

        session = PeerSession(
            session_id, worker, binding, metrics, SwapCadence(worker.busy_seconds), on_ended=report
        )
        sessions.append(session)
        return session

    registry = SessionRegistry(1, create, metrics)
    try:
        first, _ = await registry.open(await _offer())
        assert registry.get(first.session_id) is first and metrics.sample("livefuse_active_sessions") == 1
        with pytest.raises(SessionLimitError):
            await registry.open(await _offer())
        first._end("test: peer vanished")  # what ICE failure or the idle timeout does
        await asyncio.wait_for(ended.wait(), 1)
        for _ in range(50):
            if len(registry) == 0:
                break
            await asyncio.sleep(0.02)
        assert len(registry) == 0 and metrics.sample("livefuse_active_sessions") == 0
        second, _ = await registry.open(await _offer())
        assert await registry.end(second.session_id) and not await registry.end(second.session_id)
        with pytest.raises(ValueError):
            await registry.open(RTCSessionDescription(sdp="v=0\r\n", type="offer"))
        assert len(registry) == 0  # a failed open leaves nothing behind
    finally:
        await registry.close()
        await registry.close()
        await worker.close()
    with pytest.raises(SessionLimitError):
        await registry.open(await _offer())
