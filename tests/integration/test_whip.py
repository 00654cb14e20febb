"""WHIP ingest over loopback: FFmpeg's whip muxer in its own process and an OBS-like aiortc publisher,
watched through WHEP; protocol errors; nothing left behind (sessions, peer connections, tasks)."""

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from bench.clients.whip_client import WhepViewer, WhipPublisher
from run_stream import build_parser
from tests.fakes_pipeline import face_box, fake_binding, source_colour
from tests.integration.daemon_harness import camera_frame, decoded_photo, running_daemon
from tests.integration.whip_harness import (
    SOURCE,
    assert_nothing_left,
    config,
    wait_connected,
    wait_until_empty,
)
from web.engine import DaemonEngine
from web.serve import load_pipeline_binding

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "whip-test-token-123"


@asynccontextmanager
async def ffmpeg_publisher(
    url: str, media_dir: Path, frames_out: Path, seconds: float
) -> AsyncIterator[None]:
    """`python -m tests.integration.whip_publisher` against `url`, stopped (SIGTERM) on exit."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.whip_publisher", "--url", f"{url}/whip",
        "--media-dir", str(media_dir), "--photo", "fr_obama.jpg", "--seconds", str(seconds),
        "--frames-out", str(frames_out), cwd=PROJECT_ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield
    finally:
        if process.returncode is None:
            process.terminate()
        output, _ = await asyncio.wait_for(process.communicate(), 15)
        assert process.returncode == 0, output.decode(errors="replace")[-2000:]


async def wait_for_session(engine: DaemonEngine, timeout: float = 15.0) -> None:
    assert engine.registry is not None
    async with asyncio.timeout(timeout):
        while not len(engine.registry):
            await asyncio.sleep(0.05)


def closest_published(received: np.ndarray, published: np.ndarray, region: tuple[slice, slice]) -> float:
    """Mean absolute difference in `region` between `received` and its closest published frame."""
    part = received[region].astype(np.int16)
    return min(float(np.abs(part - frame[region].astype(np.int16)).mean()) for frame in published)


@pytest.mark.slow
async def test_ffmpeg_publisher_is_swapped_for_whep_viewers(
    models_dir: Path, media_dir: Path, tmp_path: Path
) -> None:
    args = build_parser().parse_args(["serve", "--models-dir", str(models_dir), "--engine", "mesh"])
    binding = await asyncio.to_thread(load_pipeline_binding, args)
    frames_out = tmp_path / "published.npy"
    async with running_daemon(binding, config(media_dir)) as (url, engine):
        async with ffmpeg_publisher(url, media_dir, frames_out, seconds=25):
            await wait_for_session(engine)
            async with WhepViewer(url, "latest", keep_frames=1) as viewer:
                await viewer.wait_for_frames(25, timeout=20)
                received = viewer.frames[-1]
                assert viewer.audio_frames_received > 0, "the publisher's Opus audio did not reach the viewer"
                session = next(iter(engine.registry._sessions.values()))  # type: ignore[union-attr]
                assert session.stats()["has_source"] and session.stats()["viewers"] == 1
        await wait_until_empty(engine)  # the muxer sent DELETE when it closed
        await assert_nothing_left(engine)

    published = np.load(frames_out)
    assert received.shape == published.shape[1:]
    face = (slice(190, 330), slice(250, 390))  # the middle of the face in the panned frames
    background = (slice(0, 100), slice(None))
    background_error = closest_published(received, published, background)
    face_error = closest_published(received, published, face)
    assert background_error < 12, f"the viewer did not get this stream ({background_error:.1f})"
    assert face_error > 20, f"the face was not swapped ({face_error:.1f})"


async def test_obs_like_publisher_fake_pipeline(media_dir: Path) -> None:
    frame = camera_frame(media_dir)
    expected = np.array(source_colour(decoded_photo(media_dir, SOURCE)), dtype=np.int16)
    async with running_daemon(fake_binding(), config(media_dir)) as (url, engine):
        async with WhipPublisher(url, frame) as publisher:
            assert publisher.offer_sdp is not None and publisher.answer_sdp is not None
            assert "a=candidate" not in publisher.offer_sdp and "end-of-candidates" not in publisher.offer_sdp
            assert "VP8" not in publisher.offer_sdp and "H264" in publisher.offer_sdp
            assert "a=candidate" in publisher.answer_sdp, "the answer must carry the server's candidates"
            assert "a=recvonly" in publisher.answer_sdp and "a=sendrecv" not in publisher.answer_sdp
            assert publisher.location == f"/whip/{publisher.session_id}"
            async with WhepViewer(url, str(publisher.session_id)) as viewer:
                await viewer.wait_for_frames(20, timeout=15)
                x1, y1, x2, y2 = face_box(viewer.frames[-1])
                face = viewer.frames[-1][y1 + 8 : y2 - 8, x1 + 8 : x2 - 8].reshape(-1, 3)
                assert np.abs(np.median(face, axis=0) - expected).max() < 12, "not swapped to --source"
                assert viewer.audio_frames_received > 0
            async with aiohttp.ClientSession() as http:
                stats_url = f"{url}/api/sessions/{publisher.session_id}"
                async with http.get(stats_url) as response:
                    stats = await response.json()
            assert stats["has_source"] and stats["frames_in"] > 0
            assert stats["frames_dropped"] < stats["frames_in"] / 2, "a WHIP session counts unsent output"
        await wait_until_empty(engine)  # DELETE on exit
        await assert_nothing_left(engine)


async def test_trickle_patch_is_applied(media_dir: Path) -> None:
    frame = camera_frame(media_dir)
    async with running_daemon(fake_binding(), config(media_dir)) as (url, engine):
        async with WhipPublisher(url, frame) as publisher, aiohttp.ClientSession() as http:
            await wait_connected(engine, publisher.session_id)
            resource = f"{url}{publisher.location}"
            fragment = (
                "a=ice-ufrag:abcd\r\na=ice-pwd:0123456789abcdef012345\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\n"
                "a=mid:0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 40000 typ host\r\na=end-of-candidates\r\n"
            )
            trickle = {"Content-Type": "application/trickle-ice-sdpfrag"}
            async with http.patch(resource, data=fragment, headers=trickle) as response:
                assert response.status == 204
            async with http.patch(
                resource, data=fragment, headers={"Content-Type": "text/plain"}
            ) as response:
                assert response.status == 415
            async with http.patch(resource, data="a=candidate:nonsense", headers=trickle) as response:
                assert response.status == 400
        await wait_until_empty(engine)
        await assert_nothing_left(engine)


async def test_protocol_errors_leave_nothing_behind(media_dir: Path) -> None:
    frame = camera_frame(media_dir)
    sdp = {"Content-Type": "application/sdp"}
    async with (
        running_daemon(fake_binding(), config(media_dir, max_sessions=1)) as (url, engine),
        aiohttp.ClientSession() as http,
    ):
        async with http.post(f"{url}/whip", data="v=0", headers={"Content-Type": "text/plain"}) as response:
            assert response.status == 415
        for body in ("hello", "v=0\r\no=- 0 0 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n", "v=0\r\nm=video x\r\n"):
            async with http.post(f"{url}/whip", data=body, headers=sdp) as response:
                assert response.status == 400, body
        for method in ("DELETE", "PATCH"):
            async with http.request(method, f"{url}/whip/nosuchstream", headers=sdp) as response:
                assert response.status == 404
        await assert_nothing_left(engine)
        async with WhipPublisher(url, frame, audio=False) as publisher:
            await wait_connected(engine, publisher.session_id)
            async with http.post(f"{url}/whip", data=publisher.offer_sdp, headers=sdp) as response:
                assert response.status == 503
                assert response.headers["Retry-After"].isdigit()
            assert len(engine.registry or ()) == 1
        await wait_until_empty(engine)
        await assert_nothing_left(engine)


async def test_token_is_required(media_dir: Path) -> None:
    frame = camera_frame(media_dir)
    async with (
        running_daemon(fake_binding(), config(media_dir, token=TOKEN)) as (url, engine),
        aiohttp.ClientSession() as http,
    ):
        for headers in ({}, {"Authorization": "Bearer wrong-token-000"}):
            async with http.post(
                f"{url}/whip", data="v=0", headers={**headers, "Content-Type": "application/sdp"}
            ) as response:
                assert response.status == 401
        with pytest.raises(ConnectionError, match="401"):
            async with WhipPublisher(url, frame, audio=False):
                pass
        await assert_nothing_left(engine)
        async with WhipPublisher(url, frame, audio=False, token=TOKEN) as publisher:
            await wait_connected(engine, publisher.session_id)
            async with http.delete(f"{url}{publisher.location}") as response:
                assert response.status == 401, "DELETE without the token must not end the stream"
            assert len(engine.registry or ()) == 1
        await wait_until_empty(engine)
        await assert_nothing_left(engine)
