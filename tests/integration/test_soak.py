"""Soak, CI version: 60 s of 4 seats calling, streaming through the fake pipeline and hanging up every
few seconds. RSS growth under 50 MB, fds and threads flat, latency flat (`bench --soak` runs the same
checks for 10 minutes on the real pipeline).

The soak runs in a fresh process: its RSS, fds and threads must be the daemon's and its clients' alone,
not whatever the suite's earlier tests left running or half-freed in the pytest process (a full run
once read +64 MB of idle RSS there; the same soak alone read +1 MB)."""

import asyncio
import multiprocessing
from pathlib import Path

import pytest

from bench.soak_bench import SoakConfig, SoakResult, format_table, soak_in_process
from tests.fakes_pipeline import FakePipeline, fake_binding
from tests.integration.daemon_harness import camera_frame

SOAK_TIMEOUT_S = 240.0


def _soak_in_fresh_process(media_dir: Path, config: SoakConfig) -> SoakResult:
    """Run in a spawned child: the soak of the fake pipeline, in a process with nothing else in it."""
    frame = camera_frame(media_dir)
    pipeline = FakePipeline(delay_s=0.005)
    source = (media_dir / "fr_biden2.jpg").read_bytes()
    return asyncio.run(soak_in_process(fake_binding(pipeline), lambda index: frame, source, config))


@pytest.mark.slow
async def test_sessions_joining_and_leaving_for_60_s_leak_nothing(media_dir: Path) -> None:
    config = SoakConfig(seconds=60.0, sessions=4, fps=15.0, life_s=(2.0, 5.0), window_s=15.0)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pending = pool.apply_async(_soak_in_fresh_process, (media_dir, config))
        result = await asyncio.to_thread(pending.get, SOAK_TIMEOUT_S)
    report = format_table(result)
    print(report)
    assert len(result.windows) == 4, report
    assert result.calls_opened >= 40, report  # about one call per seat every 4 s
    assert all(window.frames_received > 0 for window in result.windows), report
    assert result.checks() == {name: True for name in result.checks()}, report
