"""Daemon end to end over loopback WebRTC with the fake pipeline: passthrough, swap, order, isolation."""

import asyncio
from pathlib import Path

import numpy as np
from aiortc.mediastreams import AudioStreamTrack

from bench.clients.peer_client import PeerClient
from streamer.outputs.frame_stamp import STAMP_HEIGHT
from tests.fakes_pipeline import FakePipeline, face_box, fake_binding, source_colour
from tests.integration.daemon_harness import camera_frame, decoded_photo, running_daemon

SOURCES = ("fr_biden2.jpg", "fr_alex_lacamoire1.jpg", "fr_lin_manuel_miranda.png", "fr_obama2.jpg")


def _face_colour(frame: np.ndarray) -> np.ndarray:
    x1, y1, x2, y2 = face_box(frame)
    inner = frame[y1 + 8 : y2 - 8, x1 + 8 : x2 - 8].reshape(-1, 3).astype(np.float32)
    return np.median(inner, axis=0)


def _content_type(name: str) -> str:
    return "image/png" if name.endswith(".png") else "image/jpeg"


async def test_passthrough_then_swap_in_order(media_dir: Path) -> None:
    frame = camera_frame(media_dir)
    async with (
        running_daemon(fake_binding()) as (url, _engine),
        PeerClient(url, frame, keep_frames=5) as client,
    ):
        await client.wait_for_frames(30, timeout=15)
        # no source: frames come back unchanged within codec tolerance
        _, received = client.frames[-1]
        body = (slice(STAMP_HEIGHT, None), slice(None))
        error = np.abs(received[body].astype(np.int16) - frame[body].astype(np.int16))
        assert float(error.mean()) < 6.0, f"passthrough changed the picture: mean error {error.mean():.1f}"

        photo = (media_dir / "fr_biden2.jpg").read_bytes()
        answer = await client.upload_source(photo, "image/jpeg")
        assert answer["source"]["width"] == 1200 and len(answer["source"]["sha256"]) == 64
        mark = len(client.received)
        await client.wait_for_frames(mark + 45, timeout=15)
        _, swapped = client.frames[-1]
        expected = np.array(source_colour(decoded_photo(media_dir, "fr_biden2.jpg")), np.float32)
        assert np.abs(_face_colour(swapped) - expected).max() < 12, (_face_colour(swapped), expected)
        outside = np.abs(swapped[body][:, :200].astype(np.int16) - frame[body][:, :200].astype(np.int16))
        assert float(outside.mean()) < 6.0  # pixels outside the face box are untouched

        result = client.result()
        assert result.duplicates == 0 and result.out_of_order == 0 and result.unreadable == 0
        stats = await client.session_stats()
        assert stats["has_source"] and stats["frames_in"] >= result.received - 2
        assert stats["frames_out"] >= result.received


async def test_four_sessions_each_get_their_own_source(media_dir: Path) -> None:
    frame = camera_frame(media_dir)
    pipeline = FakePipeline(delay_s=0.04)  # slow enough that frames of several sessions meet in a batch
    async with running_daemon(fake_binding(pipeline)) as (url, engine):
        # 10 fps: four encode+decode round trips on both ends share this machine's 2 cores
        clients = [PeerClient(url, frame, fps=10, keep_frames=1) for _ in SOURCES]
        try:
            for client in clients:
                await client.__aenter__()
            for client, name in zip(clients, SOURCES):
                await client.upload_source((media_dir / name).read_bytes(), _content_type(name))
            marks = [len(client.received) for client in clients]
            await asyncio.gather(*(c.wait_for_frames(m + 20, timeout=20) for c, m in zip(clients, marks)))
            colours = [
                np.array(source_colour(decoded_photo(media_dir, name)), np.float32) for name in SOURCES
            ]
            for index, client in enumerate(clients):
                seen = _face_colour(client.frames[-1][1])
                distances = [float(np.abs(seen - colour).max()) for colour in colours]
                assert int(np.argmin(distances)) == index and distances[index] < 12, (index, distances)
                result = client.result()
                assert result.duplicates == 0 and result.out_of_order == 0
            assert max(pipeline.batch_sizes) > 1  # sessions shared batches
        finally:
            await asyncio.gather(*(client.close() for client in clients))
        assert len(engine.registry or []) == 0


async def test_vanished_peer_ends_its_session(media_dir: Path) -> None:
    async with running_daemon(fake_binding()) as (url, engine):
        client = PeerClient(url, camera_frame(media_dir))
        await client.__aenter__()
        try:
            await client.wait_for_frames(10, timeout=15)
            assert engine.registry is not None and len(engine.registry) == 1
            client.track.stop()  # the peer stops sending without saying goodbye
            for _ in range(100):
                if len(engine.registry) == 0:
                    break
                await asyncio.sleep(0.1)
            assert len(engine.registry) == 0, "idle session was not ended"
        finally:
            client.session_id = None  # already gone on the daemon
            await client.close()


async def test_pipeline_never_runs_on_the_event_loop(media_dir: Path) -> None:
    pipeline = FakePipeline()
    frame = camera_frame(media_dir)
    async with running_daemon(fake_binding(pipeline)) as (url, _engine), PeerClient(url, frame) as client:
        await client.upload_source((media_dir / "fr_biden2.jpg").read_bytes())
        await client.wait_for_frames(20, timeout=15)
    assert pipeline.calling_threads == {"livefuse-worker"}


async def test_h264_call_with_audio_relayed_back(media_dir: Path) -> None:
    audio = AudioStreamTrack()  # 20 ms frames of silence
    frame = camera_frame(media_dir)
    async with (
        running_daemon(fake_binding()) as (url, _engine),
        PeerClient(url, frame, codec="video/H264", audio=audio) as client,
    ):
        await client.wait_for_frames(20, timeout=15)
        for _ in range(50):
            if client.audio_frames_received >= 10:
                break
            await asyncio.sleep(0.1)
        assert client.answer_sdp is not None
        video_codecs = [line for line in client.answer_sdp.splitlines() if line.startswith("a=rtpmap")]
        assert "H264" in next(
            line for line in video_codecs if "opus" not in line.lower() and "PCM" not in line
        )
        assert client.audio_frames_received >= 10, "the call's audio did not come back"
        result = client.result()
        assert result.duplicates == 0 and result.out_of_order == 0 and result.unreadable == 0


async def test_closed_peer_connection_ends_its_session(media_dir: Path) -> None:
    async with running_daemon(fake_binding()) as (url, engine):
        client = PeerClient(url, camera_frame(media_dir))
        await client.__aenter__()
        try:
            await client.wait_for_frames(5, timeout=15)
            assert client.pc is not None and engine.registry is not None
            await client.pc.close()  # the browser tab closed: DTLS goes away, no DELETE is sent
            for _ in range(50):
                if len(engine.registry) == 0:
                    break
                await asyncio.sleep(0.1)
            assert len(engine.registry) == 0, "session outlived its peer connection"
        finally:
            client.session_id = None
            await client.close()


async def test_session_stats_carry_the_resolution_in_and_out(media_dir: Path) -> None:
    """What the page shows next to its camera size: the frame size the daemon receives and sends."""
    frame = camera_frame(media_dir, size=(1280, 720))
    async with (
        running_daemon(fake_binding()) as (url, _engine),
        PeerClient(url, frame, keep_frames=1) as client,
    ):
        await client.wait_for_frames(10, timeout=15)
        stats = await client.session_stats()
        assert stats["resolution_in"] == {"width": 1280, "height": 720}
        assert stats["resolution_out"] == {"width": 1280, "height": 720}
        await client.upload_source((media_dir / "fr_biden2.jpg").read_bytes(), "image/jpeg")
        await client.wait_for_frames(len(client.received) + 10, timeout=15)
        stats = await client.session_stats()  # swapped frames keep the size
        assert stats["resolution_out"] == {"width": 1280, "height": 720}
        _, received = client.frames[-1]
        assert received.shape[:2] == (720, 1280)
