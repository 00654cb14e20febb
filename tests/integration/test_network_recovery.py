"""A live call over a bad network (bench/clients/lossy_network.py at the client's ICE sockets, both
directions): at 2 % and 5 % loss the video keeps coming back without long stalls; after a 2 s cut of the
path it comes back soon after the path does, and the session survives a cut longer than its idle timeout
while the peer is still there. Behaviour with generous bounds; the figures themselves (frames back, p95,
longest gap, time to recover) are benchmark rows: `run_stream.py bench --live --loss 0.05 --cut 2`
(docs/benchmarks.md)."""

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.clients.call_quality import CallQuality, call_quality
from bench.clients.frames import TARGET_PHOTO, panning_face_frames
from bench.clients.lossy_network import LinkConditions, LossyNetwork
from bench.clients.peer_client import FrameSource, PeerClient
from models.face import Frame
from streamer.pipeline.image_input import read_image_file
from tests.fakes_pipeline import fake_binding
from tests.integration.daemon_harness import LOOPBACK, camera_frame, running_daemon
from web.daemon_config import DaemonConfig

logger = logging.getLogger(__name__)

FPS = 30.0
WINDOW_S = 6.0
GOOD_SOURCE = "fr_biden2.jpg"


async def _until_sent(client: PeerClient, frames: int) -> None:
    """Until the client has sent `frames` frames in all: the measured window is a count of frames."""
    async with asyncio.timeout(3 * WINDOW_S + 10):
        while client.track.sent < frames:
            await asyncio.sleep(0.05)


@dataclass(frozen=True)
class MeasuredCall:
    quality: CallQuality
    still_open: bool
    link: dict[str, dict[str, int]]
    sending: dict[str, Any] | None  # the daemon's encoder at the end (session stats)


async def _measured_call(
    media_dir: Path,
    conditions: LinkConditions,
    cut: tuple[float, float] | None,
    idle_timeout_s: float,
    moving: bool = False,
) -> MeasuredCall:
    """One swapped call for WINDOW_S under `conditions` (and a cut of (after_s, duration_s)): its quality,
    whether its session is still open at the end, the link's counters and what the daemon sends.
    `moving`: a panning face (a realistic bitrate), else one still frame (VP8 makes it tiny)."""
    config = DaemonConfig(ice_addresses=(LOOPBACK,), idle_timeout_s=idle_timeout_s)
    source: FrameSource | Frame = camera_frame(media_dir)
    if moving:
        frames = panning_face_frames(read_image_file(media_dir / TARGET_PHOTO), 640, 480, 90)
        source = lambda index: frames[index % len(frames)]
    async with (
        running_daemon(fake_binding(), config) as (url, engine),
        PeerClient(url, source, fps=FPS) as client,
    ):
        await client.upload_source((media_dir / GOOD_SOURCE).read_bytes())
        await client.wait_for_frames(15, timeout=20)
        assert client.pc is not None
        network = LossyNetwork(conditions, seed=21)
        network.attach(client.pc)
        try:
            since, sent_before = len(client.received), client.track.sent
            path_back_ms = None
            if cut is not None:
                _, end_s = network.schedule_cut(*cut)
                path_back_ms = end_s * 1000.0
            await _until_sent(client, sent_before + round(WINDOW_S * FPS))
            quality = call_quality(client, since, sent_before, path_back_ms)
            registry = engine.registry
            session = registry.get(str(client.session_id)) if registry is not None else None
            sending = session.stats()["sending"] if session is not None else None
        finally:
            network.detach()
    logger.info(
        "%s, cut %s: %s; %s; sending %s", conditions, cut, quality.describe(), network.describe(), sending
    )
    return MeasuredCall(quality, session is not None, network.describe(), sending)


@pytest.mark.parametrize("loss", [0.02, 0.05])
async def test_at_loss_the_video_keeps_coming_back_without_long_stalls(media_dir: Path, loss: float) -> None:
    call = await _measured_call(media_dir, LinkConditions(loss=loss), None, 5.0)
    quality, link = call.quality, call.link
    assert link["uplink"]["lost"] > 0 and link["downlink"]["lost"] > 0, link  # both directions lossy
    assert call.still_open
    # targets (docs/benchmarks.md): >= 70 % back, p95 <= 300 ms at 5 %; here generous, for a shared machine
    assert quality.frames_back > 0.5, quality.describe()
    assert quality.longest_gap_ms < 1500, quality.describe()  # aiortc alone stalled ~1 s at 5 % loss


async def test_after_a_2_s_cut_the_video_comes_back_and_the_session_survives(media_dir: Path) -> None:
    """The idle timeout (1.5 s) is shorter than the cut: the session lives because its peer is still
    there (ICE up, heard from within the consent lifetime), not because the cut was short."""
    call = await _measured_call(media_dir, LinkConditions(loss=0.02), (1.0, 2.0), 1.5)
    quality, link = call.quality, call.link
    assert link["uplink"]["cut"] > 0 and link["downlink"]["cut"] > 0, link
    assert call.still_open, "a network gap ended the session"
    assert quality.recovery_ms is not None, f"the video never came back: {quality.describe()}"
    assert quality.recovery_ms < 3000, quality.describe()  # target: 1.5 s (benchmark figure)


async def test_at_a_500_kbit_cap_the_daemon_follows_the_estimate_instead_of_flooding(media_dir: Path) -> None:
    """A panning face wants ~740 kbit/s at 640x480 (the size rule's start); the link carries 500. The
    daemon's encoder takes the receiver's estimate (REMB), the video keeps coming, and the bottleneck
    is not drowned in retransmissions (before: 6473 datagrams dropped there against 743 through)."""
    call = await _measured_call(media_dir, LinkConditions(rate_kbps=500), None, 5.0, moving=True)
    downlink, sending = call.link["downlink"], call.sending
    assert call.still_open
    assert sending is not None and sending["from_receiver_estimate"], sending
    assert sending["bitrate_kbps"] <= 600, sending  # the estimate's, not the 740 the size asks for
    # unbounded NACKs (aiortc alone) dropped 8.7 datagrams at the bottleneck per one through
    assert downlink["queue_full"] < 3 * downlink["passed"], downlink
    assert call.quality.frames_back > 0.3, call.quality.describe()
    assert call.quality.longest_gap_ms < 2000, call.quality.describe()
