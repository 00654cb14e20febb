"""The Janus client against a real Janus: sessions, VideoRoom requests and their errors, and media
through the SFU (an aiortc publisher, an aiortc subscriber, stamps in order)."""

import numpy as np
import pytest

from bench.clients.janus_peers import JanusPublisher, JanusSubscriber
from bench.clients.janus_server import OPEN_ROOM, PIN, PIN_ROOM, JanusServer, signed_token
from streamer.sfu import videoroom
from streamer.sfu.janus_api import JanusAuth, JanusError, JanusSession, JanusUnreachable


def _frame() -> np.ndarray:
    frame = np.zeros((480, 640, 3), np.uint8)
    frame[100:, :, 1] = 140
    return frame


async def test_rooms_and_their_errors(janus: JanusServer) -> None:
    session = await JanusSession.create(janus.url)
    try:
        handle = await session.attach()
        assert await videoroom.room_exists(handle, OPEN_ROOM)
        assert not await videoroom.room_exists(handle, 999)
        assert await videoroom.list_participants(handle, OPEN_ROOM) == []
        with pytest.raises(videoroom.RoomError) as unknown:
            await videoroom.list_participants(handle, 999)
        assert unknown.value.kind == "room"
        with pytest.raises(videoroom.RoomError) as wrong_pin:
            await videoroom.join_as_publisher(handle, PIN_ROOM, "x", pin="wrong")
        assert wrong_pin.value.kind == "pin"
        joined = await videoroom.join_as_publisher(handle, PIN_ROOM, "listener", pin=PIN)
        assert int(joined["id"]) > 0
    finally:
        await session.close()


async def test_janus_down_and_api_secret(in_namespace: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(JanusUnreachable):
        await JanusSession.create("http://127.0.0.2:9/janus")
    with JanusServer(tmp_path / "secret", 18089, api_secret="api-s3cret") as janus:
        with pytest.raises(JanusError) as refused:
            await JanusSession.create(janus.url)
        assert refused.value.code == 403
        session = await JanusSession.create(janus.url, JanusAuth(api_secret="api-s3cret"))
        await session.close()
    assert "api-s3cret" not in repr(JanusAuth(api_secret="api-s3cret"))


async def test_media_through_janus_in_order(janus: JanusServer) -> None:
    async with JanusPublisher(janus.url, OPEN_ROOM, _frame(), display="alice") as alice:
        assert alice.session is not None and alice.feed_id is not None
        probe = await alice.session.attach()
        await _wait_publishing(probe, alice.feed_id)
        async with JanusSubscriber(janus.url, OPEN_ROOM, alice.feed_id, sent_ms=alice.track.sent_ms) as bob:
            await bob.wait_for_frames(30, timeout=20)
            result = bob.result()
            assert result.unreadable == 0 and result.out_of_order == 0
            assert len(result.latencies_ms) >= 25
            assert bob.audio_frames > 0


async def _wait_publishing(handle, feed_id: int) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    async with asyncio.timeout(15):
        while True:
            participants = await videoroom.list_participants(handle, OPEN_ROOM)
            if any(p.feed_id == feed_id and p.publishing for p in participants):
                return
            await asyncio.sleep(0.1)


async def test_signed_tokens(in_namespace: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with JanusServer(tmp_path / "token", 18090, token_secret="token-s3cret") as janus:
        with pytest.raises(JanusError) as refused:
            await JanusSession.create(janus.url)
        assert refused.value.code == 403
        session = await JanusSession.create(janus.url, JanusAuth(token=signed_token("token-s3cret")))
        try:
            handle = await session.attach()
            assert await videoroom.room_exists(handle, OPEN_ROOM)
        finally:
            await session.close()
    assert "token-s3cret" not in repr(JanusAuth(token="token-s3cret"))


async def test_a_session_outlives_janus_session_timeout(in_namespace: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Janus drops a session after `session_timeout` without a request: the long poll and the keepalive
    keep ours (an attach after three timeouts still works)."""
    import asyncio

    with JanusServer(tmp_path / "timeout", 18091, session_timeout_s=2) as janus:
        session = await JanusSession.create(janus.url)
        try:
            await asyncio.sleep(6.5)
            assert not session.lost.is_set()
            handle = await session.attach()
            assert await videoroom.room_exists(handle, OPEN_ROOM)
        finally:
            await session.close()
