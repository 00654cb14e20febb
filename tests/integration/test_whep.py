"""WHEP egress over loopback with the fake pipeline: several viewers of a browser call, one viewer ends
alone, the session's end ends its viewers; protocol errors; nothing left behind."""

from pathlib import Path

import aiohttp
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection

from bench.clients.peer_client import PeerClient
from bench.clients.whip_client import WhepViewer, WhipPublisher
from streamer.outputs.frame_stamp import read_stamp
from tests.fakes_pipeline import face_box, fake_binding, source_colour
from tests.integration.daemon_harness import camera_frame, decoded_photo, running_daemon
from tests.integration.whip_harness import SOURCE, assert_nothing_left, config, wait_until_empty

# aiortc's default adds Google's STUN server: test peers stay on loopback (DESIGN.md section 7)
NO_ICE_SERVERS = RTCConfiguration(iceServers=[])

TOKEN = "whep-test-token-456"
SDP = {"Content-Type": "application/sdp"}


def face_colour(frame: np.ndarray) -> np.ndarray:
    x1, y1, x2, y2 = face_box(frame)
    return np.median(frame[y1 + 8 : y2 - 8, x1 + 8 : x2 - 8].reshape(-1, 3), axis=0)


async def recvonly_offer(*kinds: str) -> str:
    """A recvonly offer of `kinds` (its peer connection closed at once: only the SDP is needed)."""
    pc = RTCPeerConnection(NO_ICE_SERVERS)
    for kind in kinds:
        pc.addTransceiver(kind, direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return sdp


async def test_viewers_of_a_browser_call(media_dir: Path) -> None:
    frame = camera_frame(media_dir)
    expected = np.array(source_colour(decoded_photo(media_dir, SOURCE)), dtype=np.float64)
    async with running_daemon(fake_binding(), config(media_dir)) as (url, engine):
        async with PeerClient(url, frame) as call:
            await call.upload_source((media_dir / SOURCE).read_bytes())
            session_id = str(call.session_id)
            first, second = WhepViewer(url, session_id), WhepViewer(url, session_id, audio=False)
            async with first, second:
                assert first.location is not None and first.location.startswith(f"/whep/{session_id}/")
                await first.wait_for_frames(20, timeout=15)
                await second.wait_for_frames(20, timeout=15)
                for viewer in (first, second):
                    assert np.abs(face_colour(viewer.frames[-1]) - expected).max() < 12
                assert (await call.session_stats())["viewers"] == 2
                await call.wait_for_frames(20, timeout=10)  # the call itself still gets its video

                await first.close()  # DELETE: this viewer only
                assert (await call.session_stats())["viewers"] == 1
                seen = second.frames_received
                await second.wait_for_frames(seen + 10, timeout=10)
                await call.wait_for_frames(len(call.received) + 10, timeout=10)
        # the call ended: its session closed the remaining viewer's peer
        await wait_until_empty(engine)
        assert second.pc is not None and second.pc.connectionState == "closed"
        await assert_nothing_left(engine)


async def test_stamps_reach_the_caller_and_not_its_viewers(media_dir: Path) -> None:
    """A call that says it stamps (latency_stamp) gets its stamps back; its viewer sees the picture only.
    A sender that does not say so is not second-guessed: its pixels reach viewers as sent."""
    frame = camera_frame(media_dir)
    async with running_daemon(fake_binding(), config(media_dir)) as (url, engine):
        for declared in (True, False):
            async with PeerClient(url, frame, latency_stamp=declared, keep_frames=5) as call:
                assert (await call.session_stats())["settings"]["latency_stamp"] is declared
                async with WhepViewer(url, str(call.session_id), audio=False) as viewer:
                    await viewer.wait_for_frames(15, timeout=15)
                    await call.wait_for_frames(15, timeout=10)
                    assert all(stamp is not None for stamp, _ in call.frames)
                    viewer_stamps = [read_stamp(image) for image in viewer.frames]
                    if declared:
                        assert viewer_stamps == [None] * len(viewer_stamps)
                        assert viewer.latencies_ms == []
                    else:
                        assert all(stamp is not None for stamp in viewer_stamps)
        await wait_until_empty(engine)
        await assert_nothing_left(engine)


async def test_latest_follows_the_newest_whip_stream(media_dir: Path) -> None:
    frame = camera_frame(media_dir)
    async with running_daemon(fake_binding(), config(media_dir)) as (url, engine):
        async with (
            WhipPublisher(url, frame, audio=False),
            WhipPublisher(url, frame) as newest,
            WhepViewer(url, "latest") as viewer,
        ):
            assert viewer.location is not None
            assert viewer.location.startswith(f"/whep/{newest.session_id}/")
            await viewer.wait_for_frames(10, timeout=15)
            assert viewer.audio_frames_received > 0, "the WHIP stream's Opus audio is relayed"
        await wait_until_empty(engine)
        await assert_nothing_left(engine)


async def test_protocol_errors_leave_nothing_behind(media_dir: Path) -> None:
    frame = camera_frame(media_dir)
    video_offer, audio_offer = await recvonly_offer("video", "audio"), await recvonly_offer("audio")
    async with (
        running_daemon(fake_binding(), config(media_dir)) as (url, engine),
        aiohttp.ClientSession() as http,
    ):
        async with http.post(f"{url}/whep/latest", data=video_offer, headers=SDP) as response:
            assert response.status == 404  # no WHIP stream yet
        async with PeerClient(url, frame) as call:
            whep = f"{url}/whep/{call.session_id}"
            async with http.post(whep, data=video_offer, headers={"Content-Type": "text/plain"}) as response:
                assert response.status == 415
            async with http.post(f"{url}/whep/nosuchsession", data=video_offer, headers=SDP) as response:
                assert response.status == 404
            for body in ("hello", "v=0\r\nm=video x\r\n", audio_offer):
                async with http.post(whep, data=body, headers=SDP) as response:
                    assert response.status == 400, body
            for method in ("DELETE", "PATCH"):
                async with http.request(method, f"{whep}/nosuchviewer", headers=SDP) as response:
                    assert response.status == 404
            session = engine.registry.get(str(call.session_id)) if engine.registry else None
            assert session is not None
            session.outputs.max_viewers = 1
            async with WhepViewer(url, str(call.session_id), audio=False) as viewer:
                async with http.post(whep, data=video_offer, headers=SDP) as response:
                    assert response.status == 503
                    assert response.headers["Retry-After"].isdigit()
                await viewer.wait_for_frames(5, timeout=10)
            assert session.outputs.viewer_count == 0
        await wait_until_empty(engine)
        await assert_nothing_left(engine)


async def test_token_is_required(media_dir: Path) -> None:
    frame = camera_frame(media_dir)
    offer = await recvonly_offer("video")
    async with (
        running_daemon(fake_binding(), config(media_dir, token=TOKEN)) as (url, engine),
        aiohttp.ClientSession() as http,
        WhipPublisher(url, frame, audio=False, token=TOKEN) as publisher,
    ):
        whep = f"{url}/whep/{publisher.session_id}"
        for headers in (SDP, {**SDP, "Authorization": "Bearer wrong-token-000"}):
            async with http.post(whep, data=offer, headers=headers) as response:
                assert response.status == 401
        async with WhepViewer(url, str(publisher.session_id), token=TOKEN, audio=False) as viewer:
            async with http.delete(f"{url}{viewer.location}") as response:
                assert response.status == 401, "DELETE without the token must not end the viewer"
            await viewer.wait_for_frames(5, timeout=10)
        async with http.get(f"{url}/view/{publisher.session_id}") as response:
            assert response.status == 200, "the viewer page itself is public (its WHEP call is not)"
            assert "view.js" in await response.text()
    await wait_until_empty(engine)
    await assert_nothing_left(engine)
