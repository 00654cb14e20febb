"""Overload: a pipeline 3x slower than the camera for 20 s. Latency must stay flat (frames are dropped
at the mailbox, never queued), drops must be counted, and /health must stay fast."""

import asyncio
import statistics
import time
from pathlib import Path

import aiohttp
import pytest

from streamer.bench.peer_client import PeerClient
from tests.fakes_pipeline import FakePipeline, fake_binding
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
    # about two of every three frames cannot be processed: they must be dropped and counted
    assert stats["frames_dropped"] >= stats["frames_in"] // 3, stats
    assert result.received < 0.6 * result.sent

    health_ms.sort()
    assert health_ms[int(0.9 * len(health_ms))] < 50.0, f"/health slow under load: {health_ms[-5:]}"
