"""Faults stay with the session that caused them: a pipeline step that raises for one session, a peer
that vanishes (client process killed), a frame the decoder mangled, out of memory, and SIGTERM's drain.
The other sessions' video keeps flowing (no stall longer than a generous bound, frames after the fault),
and a dead session's resources are gone within 5 s. Frame rates themselves are benchmark figures
(docs/benchmarks.md), not asserted here."""

import asyncio
import fractions
import itertools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import av
import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import AudioStreamTrack

from bench.clients.peer_client import PeerClient
from streamer.realtime.batch_faults import MAX_LANE_FAILURES, is_out_of_memory
from streamer.realtime.batch_worker import BatchWorker
from streamer.realtime.micro_batcher import BatchPolicy
from streamer.realtime.peer_session import PeerSession
from streamer.realtime.session_registry import SessionRegistry
from streamer.realtime.worker_lane import InboundFrame, WorkerLane
from tests.fakes_pipeline import (
    FakeFrameJob,
    FakePipeline,
    FakeSource,
    FakeStreamState,
    FakeSwapSettings,
    fake_binding,
    source_colour,
)
from tests.integration.daemon_harness import (
    LOOPBACK,
    camera_frame,
    decoded_photo,
    running_daemon,
    serving_app,
)
from web.app import create_app
from web.app_keys import ENGINE_KEY
from web.daemon_config import DaemonConfig
from web.serve import drain_sessions

REPO_ROOT = Path(__file__).resolve().parents[2]
CLEANUP_BOUND_S = 5.0
FPS = 30.0
GOOD_SOURCE = "fr_biden2.jpg"
POISON_SOURCE = "fr_obama2.jpg"


@dataclass
class PoisonedPipeline(FakePipeline):
    """Raises for any batch holding a frame of the poisoned source (a bug that one input triggers)."""

    poison: tuple[int, int, int] | None = None

    def process_batch(self, jobs: Sequence[FakeFrameJob]) -> list[np.ndarray | None]:
        if any(job.source is not None and job.source.colour == self.poison for job in jobs):
            raise RuntimeError("pipeline step failed on this face")
        return super().process_batch(jobs)


async def _until(condition: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until `condition()` held (polled every 20 ms); TimeoutError after `timeout_s`."""
    started = time.monotonic()
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.02)
    return time.monotonic() - started


MAX_STALL_MS = 1500.0  # the others' longest gap between frames while a fault is handled: generous


def _longest_gap_ms(client: PeerClient, since: int) -> float:
    """The longest wait between two frames `client` received from index `since` on."""
    arrivals = [frame.received_ms for frame in client.received[max(since - 1, 0) :]]
    return max((b - a for a, b in itertools.pairwise(arrivals)), default=0.0)


async def _keeps_flowing(client: PeerClient, frames: int = 30) -> None:
    """`frames` more frames reach `client` (TimeoutError if its video stopped)."""
    await client.wait_for_frames(client.video_received + frames, timeout=15)


def _decoder_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "video-decoder")


def _session(registry: SessionRegistry, session_id: str | None) -> PeerSession:
    assert session_id is not None
    session = registry.get(session_id)
    assert session is not None
    return session


async def _assert_released(session: PeerSession, worker: BatchWorker | None, survivor: PeerClient) -> None:
    """What a closed session held is let go: worker lane (mailbox), peer connection, tracks; while the
    survivor gets 10 more frames (the worker keeps running), the closed session sends none."""
    assert worker is not None and session.session_id not in worker.lane_ids
    stats = session.stats()
    assert stats["connection_state"] == "closed", stats
    frames_out = stats["frames_out"]
    await _keeps_flowing(survivor, 10)
    assert session.stats()["frames_out"] == frames_out


async def test_one_sessions_failing_pipeline_step_ends_only_that_session(media_dir: Path) -> None:
    pipeline = PoisonedPipeline(poison=source_colour(decoded_photo(media_dir, POISON_SOURCE)))
    config = DaemonConfig(ice_addresses=(LOOPBACK,), idle_timeout_s=3.0)
    frame = camera_frame(media_dir)
    async with (
        running_daemon(fake_binding(pipeline), config) as (url, engine),
        PeerClient(url, frame, fps=FPS) as healthy,
        PeerClient(url, frame, fps=FPS) as other,
        PeerClient(url, frame, fps=FPS) as doomed,
    ):
        registry = engine.registry
        assert registry is not None
        for client in (healthy, other):
            await client.upload_source((media_dir / GOOD_SOURCE).read_bytes())
        await healthy.wait_for_frames(30, timeout=10)
        doomed_session = _session(registry, doomed.session_id)
        decoders_before = _decoder_threads()
        fault_from = len(healthy.received)
        await doomed.upload_source((media_dir / POISON_SOURCE).read_bytes())

        gone_after = await _until(lambda: registry.get(str(doomed.session_id)) is None, CLEANUP_BOUND_S)
        await _keeps_flowing(other)
        await _keeps_flowing(healthy)
        assert len(registry) == 2 and registry.get(str(healthy.session_id)) is not None
        await _assert_released(doomed_session, engine.worker, healthy)
        assert _decoder_threads() <= decoders_before - 1  # its server-side decoder thread is gone
        longest_gap_ms = _longest_gap_ms(healthy, fault_from)
    assert gone_after < CLEANUP_BOUND_S
    # the fault must not stall the others: their video kept coming through it
    assert longest_gap_ms < MAX_STALL_MS, longest_gap_ms


VANISHING_CLIENT = """
import asyncio, sys
import numpy as np
from bench.clients.peer_client import PeerClient

async def main(url: str) -> None:
    frame = np.random.default_rng(0).integers(0, 255, (480, 640, 3), dtype=np.uint8)
    async with PeerClient(url, frame) as client:
        await client.wait_for_frames(5, timeout=30)
        print(client.session_id, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1]))
"""


async def test_a_killed_client_is_cleaned_up_within_5_s_and_others_keep_their_rate(media_dir: Path) -> None:
    config = DaemonConfig(ice_addresses=(LOOPBACK,), idle_timeout_s=2.0)
    frame = camera_frame(media_dir)
    async with (
        running_daemon(fake_binding(), config) as (url, engine),
        PeerClient(url, frame, fps=FPS) as survivor,
    ):
        registry = engine.registry
        assert registry is not None
        await survivor.upload_source((media_dir / GOOD_SOURCE).read_bytes())
        await survivor.wait_for_frames(10, timeout=10)
        decoders_before = _decoder_threads()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", VANISHING_CLIENT, url, cwd=REPO_ROOT, stdout=asyncio.subprocess.PIPE
        )
        try:
            assert process.stdout is not None
            session_id = (await asyncio.wait_for(process.stdout.readline(), 30)).decode().strip()
            vanished = _session(registry, session_id)
            assert _decoder_threads() == decoders_before + 1
        finally:
            os.kill(process.pid, signal.SIGKILL)  # no BYE, no DTLS close: the peer just vanishes
            await process.wait()
        fault_from = len(survivor.received)
        gone_after = await _until(
            lambda: registry.get(session_id) is None and _decoder_threads() == decoders_before,
            CLEANUP_BOUND_S,
        )
        await _keeps_flowing(survivor)
        await _assert_released(vanished, engine.worker, survivor)
        assert len(registry) == 1
        longest_gap_ms = _longest_gap_ms(survivor, fault_from)
    assert gone_after < CLEANUP_BOUND_S
    assert longest_gap_ms < MAX_STALL_MS, longest_gap_ms


def mangled_frame() -> av.VideoFrame:
    """What a frame the decoder got wrong can look like to the worker: no picture, conversion fails."""
    frame = av.VideoFrame(0, 0, "yuv420p")
    frame.pts = 0
    return frame


class NotAFrame:
    """Not even a frame: what a bug upstream could hand the worker. It must not end the worker."""

    pts = 0
    time_base = None


def _frame(pts: int) -> InboundFrame:
    video_frame = av.VideoFrame.from_ndarray(np.full((96, 128, 3), 90, np.uint8), format="rgb24")
    video_frame.pts = pts
    video_frame.time_base = fractions.Fraction(1, 90_000)
    return InboundFrame(video_frame, time.monotonic())


class Delivered:
    def __init__(self) -> None:
        self.outputs: list[av.VideoFrame] = []
        self.event = threading.Event()

    def __call__(self, item: InboundFrame, output: av.VideoFrame) -> None:
        self.outputs.append(output)
        self.event.set()


async def test_mangled_frames_drop_and_end_only_their_session() -> None:
    failed: list[tuple[str, str]] = []
    worker = BatchWorker(
        fake_binding(), on_lane_failed=lambda session_id, reason: failed.append((session_id, reason))
    )
    delivered = {name: Delivered() for name in ("good", "mangled")}
    lanes = [WorkerLane(name, FakeStreamState(), FakeSwapSettings(), delivered[name]) for name in delivered]
    for lane in lanes:
        lane.source = FakeSource((1, 2, 3))
    worker.start()
    try:
        for lane in lanes:
            worker.attach(lane)
        for index in range(MAX_LANE_FAILURES + 3):
            lanes[0].mailbox.put(_frame(index))
            broken = mangled_frame() if index % 2 else NotAFrame()
            lanes[1].mailbox.put(InboundFrame(broken, time.monotonic()))  # type: ignore[arg-type]
            await _until(lambda index=index: worker.batches > index, 2.0)  # type: ignore[misc]
    finally:
        await worker.close()
    assert worker.error is None
    assert len(delivered["good"].outputs) == MAX_LANE_FAILURES + 3 and not delivered["mangled"].outputs
    assert [session_id for session_id, _ in failed] == ["mangled"]  # reported once
    assert "frames in a row failed" in failed[0][1] and lanes[0].failures == 0


@dataclass
class SmallMemoryPipeline(FakePipeline):
    """Runs out of memory above `fits` frames per batch, with ONNX Runtime's message."""

    fits: int = 2

    def process_batch(self, jobs: Sequence[FakeFrameJob]) -> list[np.ndarray | None]:
        if len(jobs) > self.fits:
            self.batch_sizes.append(len(jobs))
            raise RuntimeError(
                "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Non-zero status code returned while running Conv node."
                " Failed to allocate memory for requested buffer of size 268435456"
            )
        return super().process_batch(jobs)


async def test_out_of_memory_halves_the_batch_bucket_and_every_frame_is_still_swapped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pipeline = SmallMemoryPipeline(fits=2)
    worker = BatchWorker(fake_binding(pipeline), policy=BatchPolicy(buckets=(1, 2, 4, 8)))
    delivered = [Delivered() for _ in range(4)]
    lanes = [WorkerLane(f"s{i}", FakeStreamState(), FakeSwapSettings(), delivered[i]) for i in range(4)]
    for lane in lanes:
        lane.source = FakeSource((250, 10, 10))
    with caplog.at_level(logging.WARNING, logger="streamer.realtime.batch_worker"):
        for lane in lanes:
            lane.mailbox.put(_frame(0))  # all four wait before the worker starts: one batch of 4
            worker.attach(lane)
        worker.start()
        try:
            for sink in delivered:
                assert await asyncio.to_thread(sink.event.wait, 5.0)
        finally:
            await worker.close()
    assert worker.policy.largest == 2 and worker.policy.buckets == (1, 2)
    assert pipeline.batch_sizes == [4, 2, 2]
    for sink in delivered:
        red = sink.outputs[0].to_ndarray(format="rgb24")[48, 64, 0]
        assert red > 200, "the frame was swapped, not passed through"
    assert any(getattr(record, "event", None) == "oom_batch_halved" for record in caplog.records)
    assert all(lane.failures == 0 for lane in lanes)


def test_out_of_memory_is_recognised_from_cupy_and_onnx_runtime() -> None:
    class OutOfMemoryError(Exception):  # cupy.cuda.memory.OutOfMemoryError's name
        pass

    assert is_out_of_memory(OutOfMemoryError("Out of memory allocating 1,073,741,824 bytes"))
    assert is_out_of_memory(RuntimeError("... Failed to allocate memory for requested buffer ..."))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


async def test_drain_refuses_new_sessions_and_closes_open_ones_within_the_bound(media_dir: Path) -> None:
    config = DaemonConfig(ice_addresses=(LOOPBACK,), idle_timeout_s=3.0, drain_timeout_s=4.0)
    app = create_app(config, lambda: fake_binding())
    frame = camera_frame(media_dir)
    async with serving_app(app) as url, PeerClient(url, frame) as first, PeerClient(url, frame) as second:
        await first.wait_for_frames(5, timeout=10)
        await second.wait_for_frames(5, timeout=10)
        registry = app[ENGINE_KEY].registry
        assert registry is not None and len(registry) == 2
        started = time.monotonic()
        await drain_sessions(app)
        elapsed = time.monotonic() - started
        assert len(registry) == 0 and elapsed < config.drain_timeout_s
        async with aiohttp.ClientSession() as http:
            offer = {"type": "offer", "sdp": str(first.answer_sdp)}
            async with http.post(f"{url}/api/sessions", json=offer) as response:
                assert response.status == 503 and "Retry-After" in response.headers
                assert "shutting down" in (await response.json())["error"]
            async with http.get(f"{url}/health") as response:
                assert response.status == 200  # still answering while it drains
            async with http.get(f"{url}/ready") as response:
                assert response.status == 503
                assert (await response.json()) == {
                    "ready": False,
                    "reason": "draining: this daemon is shutting down",
                }
        received = len(first.received)
        await asyncio.sleep(0.5)
        assert len(first.received) <= received + 2, "frames still arrive after the drain"


async def test_an_answered_offer_that_sends_no_video_is_reaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A receive-only offer never starts a video reader: only the idle reaper can end it."""
    monkeypatch.setattr("web.limits.FIRST_FRAME_TIMEOUT_S", 1.0)
    config = DaemonConfig(ice_addresses=(LOOPBACK,), idle_timeout_s=1.0)
    async with running_daemon(fake_binding(), config) as (url, engine), aiohttp.ClientSession() as http:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # no default STUN: loopback only
        try:
            pc.addTrack(AudioStreamTrack())
            pc.addTransceiver("video", direction="recvonly")
            await pc.setLocalDescription(await pc.createOffer())
            offer = {"type": "offer", "sdp": pc.localDescription.sdp}
            async with http.post(f"{url}/api/sessions", json=offer) as response:
                assert response.status == 201
                session_id = (await response.json())["id"]
            registry = engine.registry
            assert registry is not None and registry.get(session_id) is not None
            gone_after = await _until(lambda: registry.get(session_id) is None, 6.0)
            async with http.get(f"{url}/api/sessions/{session_id}") as response:  # the client asks why
                assert response.status == 404
                assert "was ended by the server: idle" in (await response.json())["error"]
        finally:
            await pc.close()
    assert 0.9 < gone_after < 4.0
