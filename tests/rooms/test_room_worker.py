"""A room job on the daemon against a real Janus: an aiortc publisher sends stamped video into a room,
`POST /api/rooms` makes the daemon swap it, three aiortc subscribers get "alice (swapped)" (frames
swapped, in order, latency measured, audio passed through); the publisher leaves and the swapped feed is
gone within 2 s, comes back and is picked up again, unpublishes (staying in the room) and the swapped
feed is gone again within 2 s; and the feed shares the batch worker with a direct call."""

import asyncio
import base64
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import numpy as np

from bench.clients.janus_peers import JanusPublisher, JanusSubscriber
from bench.clients.janus_server import OPEN_ROOM, JanusServer
from bench.clients.peer_client import PeerClient
from streamer.realtime.micro_batcher import BatchPolicy
from streamer.sfu import videoroom
from tests.fakes_pipeline import FakePipeline, face_box, fake_binding, source_colour
from tests.integration.daemon_harness import running_daemon
from tests.rooms.room_harness import (
    absent,
    publishing,
    publishing_as,
    room_config,
    room_probe,
    source_body,
    textured_frame,
    wait_job,
    wait_participants,
)

FEED = 7001


def _swapping_again(state: dict[str, Any]) -> bool:
    """A feed is listed from its join: the job counts it once it is published."""
    return state["state"] == "swapping" and state["joins"] == 2


def swapped_share(frame: np.ndarray, colour: tuple[int, int, int]) -> float:
    """The share of the face box painted in the source's colour (codec noise allowed)."""
    x1, y1, x2, y2 = face_box(frame)
    box = frame[y1 + 4 : y2 - 4, x1 + 4 : x2 - 4].astype(np.int16)
    close = np.all(np.abs(box - np.array(colour, np.int16)) <= 12, axis=2)
    return float(close.mean())


async def test_room_job_swaps_a_feed_for_three_subscribers_and_follows_it(
    janus: JanusServer, record_property: Callable[[str, object], None]
) -> None:
    source = textured_frame(seed=2)
    colour = source_colour(source)
    async with (
        running_daemon(fake_binding(), room_config()) as (url, engine),
        aiohttp.ClientSession() as http,
        room_probe(janus.url) as probe,
    ):
        alice = JanusPublisher(janus.url, OPEN_ROOM, textured_frame(), display="alice", feed_id=FEED)
        async with alice:
            await wait_participants(probe, OPEN_ROOM, publishing(FEED), 15)
            body = {"janus": janus.url, "room": OPEN_ROOM, "feed": FEED, "source": source_body(source)}
            async with http.post(f"{url}/api/rooms", json=body) as response:
                job = await response.json()
                assert response.status == 201, job
                location = response.headers["Location"]
            assert job["state"] == "swapping" and job["feed_display"] == "alice"
            swapped = int(job["published_id"])
            await wait_participants(probe, OPEN_ROOM, publishing_as("alice (swapped)"), 15)
            assert engine.registry is not None and len(engine.registry) == 1  # the feed is a session
            viewers = [
                JanusSubscriber(janus.url, OPEN_ROOM, swapped, sent_ms=alice.track.sent_ms, keep_frames=True)
                for _ in range(3)
            ]
            try:
                for viewer in viewers:
                    await viewer.__aenter__()
                for viewer in viewers:
                    await viewer.wait_for_frames(45, timeout=30)
                for index, viewer in enumerate(viewers):
                    result = viewer.result(since=10)
                    assert result.unreadable == 0 and result.out_of_order == 0 and result.duplicates == 0
                    assert len(result.latencies_ms) >= 30
                    assert viewer.last_frame is not None
                    assert swapped_share(viewer.last_frame, colour) > 0.9
                    assert viewer.audio_frames > 0  # alice's audio passed through
                    record_property(f"viewer{index}_p50_ms", round(result.p50_ms or 0.0, 1))
            finally:
                for viewer in viewers:
                    await viewer.close()
        left = time.monotonic()  # alice left the room
        await wait_participants(probe, OPEN_ROOM, absent(swapped), 2.0)
        record_property("swapped_gone_s", round(time.monotonic() - left, 2))
        await wait_job(http, f"{url}{location}", lambda state: state["state"] == "waiting", 5)  # once left
        assert len(engine.registry) == 0

        async with JanusPublisher(
            janus.url, OPEN_ROOM, textured_frame(), display="alice", feed_id=FEED
        ) as returned:
            await wait_participants(probe, OPEN_ROOM, publishing_as("alice (swapped)"), 10)
            again = await wait_job(http, f"{url}{location}", _swapping_again, 5)
            await returned.unpublish()  # stays in the room, sends nothing
            await wait_participants(probe, OPEN_ROOM, absent(int(again["published_id"])), 2.0)
            assert any(p.feed_id == FEED for p in await videoroom.list_participants(probe, OPEN_ROOM))
        async with http.delete(f"{url}{location}") as response:
            assert response.status == 204
        async with http.get(f"{url}/api/rooms") as response:
            assert await response.json() == []


async def test_room_job_is_back_after_a_janus_restart(janus: JanusServer) -> None:
    source = textured_frame(seed=3)
    async with (
        running_daemon(fake_binding(), room_config()) as (url, _engine),
        aiohttp.ClientSession() as http,
    ):
        async with JanusPublisher(janus.url, OPEN_ROOM, textured_frame(), display="bob") as bob:
            async with room_probe(janus.url) as probe:
                assert bob.feed_id is not None
                await wait_participants(probe, OPEN_ROOM, publishing(bob.feed_id), 15)
            body = {"janus": janus.url, "room": OPEN_ROOM, "display": "bob", "source": source_body(source)}
            async with http.post(f"{url}/api/rooms", json=body) as response:
                assert response.status == 201, await response.text()
                location = response.headers["Location"]
        await asyncio.to_thread(janus.restart)
        async with JanusPublisher(janus.url, OPEN_ROOM, textured_frame(), display="bob"):
            back = time.monotonic()
            async with room_probe(janus.url) as probe:
                await wait_participants(probe, OPEN_ROOM, publishing_as("bob (swapped)"), 5.0)
            assert time.monotonic() - back < 5.0
            await wait_job(http, f"{url}{location}", _swapping_again, 5)


async def test_a_room_feed_shares_the_batch_with_a_direct_call(janus: JanusServer) -> None:
    """The room's feed is one more lane of the daemon's one batch worker: with a direct call open too,
    batches of two frames (one of each) go through the pipeline."""
    pipeline = FakePipeline()
    # both senders run at exactly 30 fps with a fixed phase between them: a frame waits up to one frame
    # interval for the other's, so the two always meet (with the 4 ms default they meet only by chance)
    config = room_config(batch_policy=BatchPolicy(max_wait_ms=40.0))
    async with (
        running_daemon(fake_binding(pipeline), config) as (url, engine),
        aiohttp.ClientSession() as http,
        room_probe(janus.url) as probe,
        JanusPublisher(janus.url, OPEN_ROOM, textured_frame(), display="erin", feed_id=FEED + 1),
    ):
        await wait_participants(probe, OPEN_ROOM, publishing(FEED + 1), 15)
        body = {
            "janus": janus.url,
            "room": OPEN_ROOM,
            "feed": FEED + 1,
            "source": source_body(textured_frame(4)),
        }
        async with http.post(f"{url}/api/rooms", json=body) as response:
            assert response.status == 201, await response.text()
        # the direct call gathers on 127.0.0.1 (the client's rule); the room's peers are connected already
        async with PeerClient(url, textured_frame(6)) as call:
            await call.upload_source(base64.b64decode(source_body(textured_frame(7))), "image/png")
            await call.wait_for_frames(30, timeout=20)
            assert engine.registry is not None and len(engine.registry) == 2
            assert 2 in pipeline.batch_sizes


async def test_a_kicked_swapped_feed_is_published_again(janus: JanusServer) -> None:
    async with (
        running_daemon(fake_binding(), room_config()) as (url, _engine),
        aiohttp.ClientSession() as http,
        room_probe(janus.url) as probe,
        JanusPublisher(janus.url, OPEN_ROOM, textured_frame(), display="fay", feed_id=FEED + 2),
    ):
        await wait_participants(probe, OPEN_ROOM, publishing(FEED + 2), 15)
        body = {
            "janus": janus.url,
            "room": OPEN_ROOM,
            "feed": FEED + 2,
            "source": source_body(textured_frame(8)),
        }
        async with http.post(f"{url}/api/rooms", json=body) as response:
            job = await response.json()
            assert response.status == 201, job
        kicked = int(job["published_id"])
        await probe.request({"request": "kick", "room": OPEN_ROOM, "id": kicked})  # the room has no secret
        await wait_participants(
            probe,
            OPEN_ROOM,
            lambda ps: any(p.display == "fay (swapped)" and p.feed_id != kicked for p in ps),
            5,
        )
        state = await wait_job(http, f"{url}/api/rooms/{job['id']}", _swapping_again, 5)
        assert int(state["published_id"]) != kicked
