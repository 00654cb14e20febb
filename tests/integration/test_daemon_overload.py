"""Overload: a pipeline 3x slower than the camera for 20 s, and one stage that takes 200 ms. Latency must
stay flat (frames are dropped at the mailboxes, never queued), the slow stage must always get the newest
frame, drops must be counted, and /health must stay fast."""

import asyncio
import statistics
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import aiohttp
import pytest

from bench.clients.peer_client import PeerClient
from models.face import Frame
from streamer.outputs.frame_stamp import read_stamp
from tests.fakes_pipeline import FakeFrameJob, FakePipeline, fake_binding
from tests.integration.daemon_harness import camera_frame, running_daemon

FPS = 30.0
FRAME_MS = 1000.0 / FPS
RUN_S = 20.0
WINDOW_S = 3.0


@pytest.mark.slow
async def test_latency_stays_flat_when_the_pipeline_is_too_slow(media_dir: Path) -> None:
    pipeline = FakePipeline(delay_s=3 / FPS)  # 100 ms per batch against a frame every 33 ms
    frame = camera_frame(media_dir)
    async with (
        running_daemon(fake_binding(pipeline)) as (url, _engine),
        PeerClient(url, frame, fps=FPS) as client,
        aiohttp.ClientSession() as http,
    ):
        await client.upload_source((media_dir / "fr_biden2.jpg").read_bytes())
        await client.wait_for_frames(5, timeout=10)
        started = time.monotonic()
        health_ms: list[float] = []
        while time.monotonic() - started < RUN_S:
            sent = time.perf_counter()
            async with http.get(f"{url}/health") as response:
                assert response.status == 200 and (await response.json()) == {"status": "ok"}
            health_ms.append((time.perf_counter() - sent) * 1000.0)
            await asyncio.sleep(0.25)
        stats = await client.session_stats()

    frames = [f for f in client.received if f.latency_ms is not None]
    first = frames[0].received_ms
    last = frames[-1].received_ms
    start_window = [f.latency_ms for f in frames if f.received_ms - first < WINDOW_S * 1000]
    end_window = [f.latency_ms for f in frames if last - f.received_ms < WINDOW_S * 1000]
    start_ms = statistics.median(x for x in start_window if x is not None)
    end_ms = statistics.median(x for x in end_window if x is not None)
    assert end_ms <= start_ms + FRAME_MS, f"latency grew: {start_ms:.0f} ms -> {end_ms:.0f} ms"
    assert end_ms < 400, f"latency {end_ms:.0f} ms: frames are being queued, not dropped"

    result = client.result()
    assert result.duplicates == 0 and result.out_of_order == 0
    # about two of every three frames cannot be processed: they are dropped at a mailbox or, once the
    # session swaps fewer frames (its cadence), shed; either way counted, and said in the stats
    quality = stats["quality"]
    assert stats["frames_dropped"] + quality["frames_shed"] >= stats["frames_in"] // 3, stats
    assert Fraction(quality["swap_share"]) <= Fraction(1, 2) and "busy" in quality["reason"], quality
    assert result.received < 0.6 * result.sent

    health_ms.sort()
    assert health_ms[int(0.9 * len(health_ms))] < 50.0, f"/health slow under load: {health_ms[-5:]}"


class StampRecordingPipeline(FakePipeline):
    """The fake, 200 ms per batch, noting for every frame it swaps the frame's stamp and the newest
    stamp the client had sent at that moment (the client runs in this process)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(delay_s=delay_s)
        self.client: PeerClient | None = None
        self.lag_frames: list[int] = []  # newest sent - processed, per swapped frame
        self.processed: set[int] = set()

    def process_batch(self, jobs: Sequence[FakeFrameJob]) -> list[Frame | None]:
        for job in jobs:
            stamp = read_stamp(job.frame)
            if job.source is not None and stamp is not None and self.client is not None:
                self.processed.add(stamp)
                self.lag_frames.append(self.client.track.sent - 1 - stamp)
        return super().process_batch(jobs)


@pytest.mark.slow
async def test_a_200_ms_swap_returns_the_newest_frames_and_nothing_queues(media_dir: Path) -> None:
    """Each frame the slow stage takes is one of the newest sent (a queue would fall further behind
    with every frame), the frames that come back are those, in order, and at most one frame ever waits
    for the encoder (the issue's bound is 2)."""
    pipeline = StampRecordingPipeline(delay_s=0.2)
    async with (
        running_daemon(fake_binding(pipeline)) as (url, engine),
        PeerClient(url, camera_frame(media_dir), fps=FPS, stamp_mode="counter") as client,
    ):
        pipeline.client = client
        await client.upload_source((media_dir / "fr_biden2.jpg").read_bytes())
        await client.wait_for_frames(5, timeout=10)
        since = len(client.received)
        await client.wait_for_frames(since + 25, timeout=30)  # ~5 s of 200 ms swaps
        assert engine.registry is not None
        (session,) = engine.registry.sessions()
        max_waiting = session.outbound_max_waiting

    lags = pipeline.lag_frames[2:]  # after the source took effect
    assert len(lags) >= 15, lags
    in_flight = 200 / FRAME_MS  # frames sent while one swap runs: the most a fresh frame can lag
    assert max(lags) <= 2 * in_flight, f"the slow stage took stale frames: {lags}"
    quarter = len(lags) // 4
    # a queue falls a whole swap's worth of frames (in_flight) further behind with every swap, over this
    # run's 25-odd swaps some 150 frames; what the lag drifts by here is the transport's and decoder's
    # delay: less than one swap's worth over the run (seen 0 -> 5 frames in about one run of five, on
    # this revision and on 63d9855 alike)
    assert statistics.median(lags[-quarter:]) < statistics.median(lags[:quarter]) + in_flight, str(lags)

    result = client.result(since)
    assert result.duplicates == 0 and result.out_of_order == 0
    returned = [frame.stamp for frame in client.received[since:] if frame.stamp is not None]
    swapped_back = [stamp for stamp in returned if stamp in pipeline.processed]
    assert len(swapped_back) >= 0.9 * len(returned), "frames came back that the slow stage never took"
    assert max_waiting <= 2
