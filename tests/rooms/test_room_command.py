"""`run_stream.py room` end to end with the real models: it joins a real Janus room, swaps alice's face
(the subscriber sees a different face than alice sends, stamps in order) and publishes "alice (swapped)";
SIGTERM makes it leave the room and exit 0."""

import asyncio
import signal
import sys
from pathlib import Path

import numpy as np

from bench.clients.janus_peers import JanusPublisher, JanusSubscriber
from bench.clients.janus_server import OPEN_ROOM, JanusServer
from bench.clients.network_namespace import ADDRESS
from streamer.sfu import videoroom
from tests.integration.daemon_harness import camera_frame
from tests.rooms.room_harness import absent, publishing, publishing_as, room_probe, wait_participants

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FACE = (slice(120, 420), slice(200, 520))  # around the face of camera_frame's photo, clear of the stamp


async def _face_difference(
    janus: JanusServer, feed_id: int, sent: np.ndarray, sent_ms: dict[int, float]
) -> float:
    async with JanusSubscriber(janus.url, OPEN_ROOM, feed_id, sent_ms=sent_ms, keep_frames=True) as viewer:
        await viewer.wait_for_frames(20, timeout=30)
        result = viewer.result(since=5)
        assert result.unreadable == 0 and result.out_of_order == 0, result
        assert viewer.last_frame is not None
        return float(np.abs(viewer.last_frame[FACE].astype(np.int16) - sent[FACE].astype(np.int16)).mean())


async def test_room_command_swaps_a_feed_and_leaves_on_sigterm(
    janus: JanusServer, media_dir: Path, models_dir: Path
) -> None:
    frame = camera_frame(media_dir)
    async with (
        room_probe(janus.url) as probe,
        JanusPublisher(janus.url, OPEN_ROOM, frame, display="alice", feed_id=9001) as alice,
    ):
        await wait_participants(probe, OPEN_ROOM, publishing(9001), 15)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "run_stream.py", "room", "--janus", janus.url, "--room", str(OPEN_ROOM),
            "--display", "alice", "--source", str(media_dir / "fr_biden2.jpg"), "--engine", "mesh",
            "--models-dir", str(models_dir), "--ice-address", ADDRESS, cwd=PROJECT_ROOT,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            await wait_participants(probe, OPEN_ROOM, publishing_as("alice (swapped)"), 90)
            participants = await videoroom.list_participants(probe, OPEN_ROOM)
            swapped = next(p.feed_id for p in participants if p.display == "alice (swapped)")
            as_sent = await _face_difference(janus, 9001, frame, alice.track.sent_ms)
            as_swapped = await _face_difference(janus, swapped, frame, alice.track.sent_ms)
            assert as_swapped > as_sent + 4, (as_sent, as_swapped)  # another face, not codec noise
            process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), 20)
            assert process.returncode == 0, stderr.decode(errors="replace")[-2000:]
            await wait_participants(probe, OPEN_ROOM, absent(swapped), 2.0)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
