"""`run_stream.py bench --soak`: sessions joining and leaving for minutes, to catch what only shows up
over time: memory that grows, file descriptors or threads that leak with each session, latency that
creeps up.

The daemon runs in this process on a loopback port (so one RSS covers daemon and clients: a leak on
either side counts), `sessions` slots each open a WebRTC call, set a source, stream for a few seconds,
hang up and dial again. Every `window_s` (a minute by default) the soak records RSS, open fds, native
threads and the glass-to-glass latency of the frames received in that window (from frame stamps).
"""

import argparse
import asyncio
import ctypes
import gc
import json
import logging
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.clients.daemon_process import free_loopback_port
from bench.clients.peer_client import PeerClient, ReceivedFrame
from models.face import Frame
from streamer.realtime.pipeline_binding import PipelineBinding
from web.app import create_app
from web.app_keys import ENGINE_KEY
from web.daemon_config import DaemonConfig

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
DEFAULT_SECONDS = 600.0
SAMPLE_INTERVAL_S = 0.5
MAX_RSS_GROWTH_MB = 50.0
# Idle figures are compared between the first window after warm-up (codecs, allocator arenas and the
# default executor grow during the first calls) and the last one.
MAX_FD_GROWTH = 4
MAX_THREAD_GROWTH = 4
IDLE_WAIT_S = 15.0  # for every seat to hang up
IDLE_SETTLE_S = 1.0  # thread and fd counts unchanged this long: teardown has finished
MAX_LATENCY_DRIFT = 2.0  # later windows' median latency at most this times the earlier ones' (+ 4 frames):
# a shared CI machine moves it by that much; frames that queue instead of dropping move it by seconds

FrameSource = Callable[[int], Frame]


@dataclass(frozen=True)
class SoakConfig:
    seconds: float = DEFAULT_SECONDS
    sessions: int = 4
    fps: float = 15.0
    life_s: tuple[float, float] = (3.0, 8.0)  # how long each call lasts (uniform)
    window_s: float = 60.0
    warmup_s: float = 30.0  # the baseline is the first window ending after this
    seed: int = 0


@dataclass(frozen=True)
class SoakWindow:
    """One window. The idle figures are read at its end, after every seat hung up and the heap was
    trimmed: with no call live they should come back to the same values each time (a leak raises
    them; calls in flight cannot). Peaks are from samples taken during the calls."""

    end_s: float
    idle_rss_mb: float
    idle_fds: int
    idle_threads: int
    peak_rss_mb: float
    peak_fds: int
    peak_threads: int
    calls_opened: int
    frames_received: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None


@dataclass(frozen=True)
class SoakResult:
    config: SoakConfig
    windows: tuple[SoakWindow, ...]
    calls_opened: int
    call_failures: int

    @property
    def measured(self) -> tuple[SoakWindow, ...]:
        """The windows from the baseline (first one ending after warm-up) on."""
        after = [index for index, window in enumerate(self.windows) if window.end_s >= self.config.warmup_s]
        return self.windows[after[0] if after else 0 :]

    @property
    def rss_growth_mb(self) -> float:
        return self.measured[-1].idle_rss_mb - self.measured[0].idle_rss_mb

    @property
    def fd_growth(self) -> int:
        return self.measured[-1].idle_fds - self.measured[0].idle_fds

    @property
    def thread_growth(self) -> int:
        return self.measured[-1].idle_threads - self.measured[0].idle_threads

    def latency_halves_ms(self) -> tuple[float | None, float | None]:
        """Median of the window p50s in the first and the second half of the measured windows."""
        p50s = [window.latency_p50_ms for window in self.measured]
        half = max(1, len(p50s) // 2)
        first = [value for value in p50s[:half] if value is not None]
        second = [value for value in p50s[half:] if value is not None]
        return (
            statistics.median(first) if first else None,
            statistics.median(second) if second else None,
        )

    def checks(self) -> dict[str, bool]:
        """The soak's pass criteria (the CI test asserts the same)."""
        first, second = self.latency_halves_ms()
        frame_ms = 1000.0 / self.config.fps
        latency_flat = (
            first is not None and second is not None and second <= first * MAX_LATENCY_DRIFT + 4 * frame_ms
        )
        return {
            "rss_growth_under_50_mb": self.rss_growth_mb < MAX_RSS_GROWTH_MB,
            "fds_flat": self.fd_growth <= MAX_FD_GROWTH,
            "threads_flat": self.thread_growth <= MAX_THREAD_GROWTH,
            "latency_flat": latency_flat,
            "no_failed_calls": self.call_failures == 0,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "windows": [asdict(window) for window in self.windows],
            "calls_opened": self.calls_opened,
            "call_failures": self.call_failures,
            "baseline_end_s": self.measured[0].end_s,
            "latency_halves_p50_ms": self.latency_halves_ms(),
            "rss_growth_mb": round(self.rss_growth_mb, 1),
            "fd_growth": self.fd_growth,
            "thread_growth": self.thread_growth,
            "checks": self.checks(),
        }


def release_free_heap() -> None:
    """Hand freed heap pages back to the OS (glibc malloc_trim), so RSS tracks live memory rather than
    the allocator's high-water mark."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: RSS is then read as it is
        pass


def process_resources() -> tuple[float, int, int]:
    """(RSS in MB, open file descriptors, native threads) of this process, from /proc."""
    with open("/proc/self/statm") as statm:
        rss_pages = int(statm.read().split()[1])
    threads = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**20, len(os.listdir("/proc/self/fd")), threads


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


@dataclass
class _Seats:
    """Shared by the seats and the sampler (event loop only): tallies, and the pause for idle readings."""

    dialing: asyncio.Event = field(default_factory=asyncio.Event)  # clear: hang up and wait
    stopped: bool = False
    live_calls: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    frames: int = 0
    calls_opened: int = 0
    call_failures: int = 0

    def harvest(self, frames: list[ReceivedFrame]) -> None:
        self.frames += len(frames)
        self.latencies_ms.extend(frame.latency_ms for frame in frames if frame.latency_ms is not None)


async def _call(
    base_url: str, frames: FrameSource, source_image: bytes, config: SoakConfig, seats: _Seats, life_s: float
) -> None:
    loop = asyncio.get_running_loop()
    async with PeerClient(base_url, frames, fps=config.fps) as client:
        seats.live_calls += 1
        try:
            seats.calls_opened += 1
            await client.upload_source(source_image)
            harvested = 0
            ends = loop.time() + life_s
            while loop.time() < ends and seats.dialing.is_set():
                await asyncio.sleep(min(SAMPLE_INTERVAL_S, max(0.0, ends - loop.time())))
                seats.harvest(client.received[harvested:])
                harvested = len(client.received)
        finally:
            seats.live_calls -= 1


async def _seat(
    base_url: str,
    frames: FrameSource,
    source_image: bytes,
    config: SoakConfig,
    seats: _Seats,
    rng: random.Random,
) -> None:
    """One seat: call, stream a few seconds, hang up, dial again, until the soak stops."""
    while True:
        await seats.dialing.wait()
        if seats.stopped:
            return
        life_s = rng.uniform(*config.life_s)
        try:
            await _call(base_url, frames, source_image, config, seats, life_s)
        except (ConnectionError, ValueError, TimeoutError, OSError, aiohttp.ClientError) as error:
            seats.call_failures += 1
            logger.warning("soak call failed: %s", error)
        await asyncio.sleep(rng.uniform(0.2, 1.0))


async def _idle_reading(seats: _Seats) -> tuple[float, int, int]:
    """Every seat hangs up; once no call is live and teardown settled, trim the heap and read."""
    seats.dialing.clear()
    try:
        async with asyncio.timeout(IDLE_WAIT_S):
            while seats.live_calls:
                await asyncio.sleep(0.1)
        reading = await _settled_reading()
    finally:
        seats.dialing.set()
    return reading


async def _settled_reading() -> tuple[float, int, int]:
    """After a cyclic GC, once thread and fd counts held still for IDLE_SETTLE_S."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + IDLE_WAIT_S
    gc.collect()  # codec contexts of ended calls sit in reference cycles; freeing them joins their threads
    reading = process_resources()
    steady_since = loop.time()
    while loop.time() - steady_since < IDLE_SETTLE_S and loop.time() < give_up:
        await asyncio.sleep(0.25)
        latest = process_resources()
        if latest[1:] != reading[1:]:
            steady_since = loop.time()
        reading = latest
    release_free_heap()
    return process_resources()


async def soak(base_url: str, frames: FrameSource, source_image: bytes, config: SoakConfig) -> SoakResult:
    """Run the soak against a daemon at `base_url` (in this process, so RSS covers both sides)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    seats = _Seats()
    seats.dialing.set()
    rng = random.Random(config.seed)
    stagger_s = sum(config.life_s) / 2 / config.sessions

    async def delayed_seat(index: int) -> None:
        await asyncio.sleep(index * stagger_s)
        await _seat(base_url, frames, source_image, config, seats, random.Random(rng.random()))

    windows: list[SoakWindow] = []
    async with asyncio.TaskGroup() as group:
        for index in range(config.sessions):
            group.create_task(delayed_seat(index), name=f"soak-seat-{index}")
        try:
            for _ in range(max(1, round(config.seconds / config.window_s))):
                window_end = loop.time() + config.window_s
                samples = [process_resources()]
                while loop.time() < window_end:
                    await asyncio.sleep(SAMPLE_INTERVAL_S)
                    samples.append(process_resources())
                idle = await _idle_reading(seats)
                windows.append(_window(loop.time() - started, idle, samples, seats))
                logger.info("soak window: %s", windows[-1])
                seats.latencies_ms, seats.frames = [], 0
        finally:
            seats.stopped = True
            seats.dialing.set()  # seats waiting to dial see the stop; calls in progress run out
    return SoakResult(config, tuple(windows), seats.calls_opened, seats.call_failures)


def _window(
    end_s: float, idle: tuple[float, int, int], samples: list[tuple[float, int, int]], seats: _Seats
) -> SoakWindow:
    return SoakWindow(
        end_s=round(end_s, 1),
        idle_rss_mb=round(idle[0], 1),
        idle_fds=idle[1],
        idle_threads=idle[2],
        peak_rss_mb=round(max(rss for rss, _, _ in samples), 1),
        peak_fds=max(fds for _, fds, _ in samples),
        peak_threads=max(threads for _, _, threads in samples),
        calls_opened=seats.calls_opened,
        frames_received=seats.frames,
        latency_p50_ms=_percentile(seats.latencies_ms, 0.5),
        latency_p95_ms=_percentile(seats.latencies_ms, 0.95),
    )


async def soak_in_process(
    binding: PipelineBinding, frames: FrameSource, source_image: bytes, config: SoakConfig
) -> SoakResult:
    """Serve `binding` on a loopback port in this process and soak it."""
    daemon_config = DaemonConfig(
        ice_addresses=(LOOPBACK,), max_sessions=config.sessions + 2, idle_timeout_s=5.0
    )
    app = create_app(daemon_config, lambda: binding)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        port = free_loopback_port()
        await web.TCPSite(runner, LOOPBACK, port).start()
        await app[ENGINE_KEY].loaded
        return await soak(f"http://{LOOPBACK}:{port}", frames, source_image, config)
    finally:
        await runner.cleanup()


def format_table(result: SoakResult) -> str:
    config = result.config
    lines = [
        f"soak: {config.sessions} seats, calls of {config.life_s[0]:.0f}-{config.life_s[1]:.0f} s,"
        + f" {config.fps:.0f} fps, {result.calls_opened} calls, {result.call_failures} failed",
        "         idle (all hung up)         peak (in calls)",
        f"{'t (s)':>7}{'RSS MB':>9}{'fds':>6}{'thr':>5}{'RSS MB':>10}{'fds':>6}{'thr':>5}"
        + f"{'calls':>7}{'frames':>8}{'p50 ms':>8}{'p95 ms':>8}",
    ]
    for window in result.windows:
        p50 = "-" if window.latency_p50_ms is None else f"{window.latency_p50_ms:.0f}"
        p95 = "-" if window.latency_p95_ms is None else f"{window.latency_p95_ms:.0f}"
        lines.append(
            f"{window.end_s:>7.0f}{window.idle_rss_mb:>9.1f}{window.idle_fds:>6}{window.idle_threads:>5}"
            f"{window.peak_rss_mb:>10.1f}{window.peak_fds:>6}{window.peak_threads:>5}"
            f"{window.calls_opened:>7}{window.frames_received:>8}{p50:>8}{p95:>8}"
        )
    first, second = result.latency_halves_ms()
    lines.append(
        f"from {result.measured[0].end_s:.0f} s on (idle): RSS {result.rss_growth_mb:+.1f} MB,"
        f" fds {result.fd_growth:+d}, threads {result.thread_growth:+d}; latency p50 {first:.0f} -> {second:.0f} ms"
    )
    lines.append(
        "checks: " + ", ".join(f"{name} {'ok' if ok else 'FAILED'}" for name, ok in result.checks().items())
    )
    return "\n".join(lines)


def run_soak(args: argparse.Namespace) -> int:
    """`bench --soak`: the real pipeline, 4 seats, 10 minutes (or --seconds); 1 when a check fails."""
    from bench.clients.frames import (
        SOURCE_PHOTO,
        TARGET_PHOTO,
        face_size_from_args,
        face_size_label,
        media_dir_from_args,
        panning_face_frames,
    )
    from streamer.pipeline.image_input import read_image_file
    from web.serve import load_pipeline_binding

    media = media_dir_from_args(args)
    seconds = args.seconds or DEFAULT_SECONDS
    config = SoakConfig(seconds=seconds, window_s=min(60.0, seconds / 6))
    face_share = face_size_from_args(args)
    clip = panning_face_frames(read_image_file(media / TARGET_PHOTO), args.width, args.height, 90, face_share)
    binding = load_pipeline_binding(args)
    started = time.monotonic()
    result = asyncio.run(
        soak_in_process(
            binding, lambda index: clip[index % len(clip)], (media / SOURCE_PHOTO).read_bytes(), config
        )
    )
    logger.info("soak finished in %.0f s", time.monotonic() - started)
    sys.stdout.write(
        f"{args.width}x{args.height}, {face_size_label(face_share)}\n" + format_table(result) + "\n"
    )
    if getattr(args, "output", None):
        Path(args.output).write_text(json.dumps(result.to_json(), indent=2))
    return 0 if all(result.checks().values()) else 1
