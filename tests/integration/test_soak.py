"""Soak, CI version: 60 s of 4 seats calling, streaming through the fake pipeline and hanging up every
few seconds. RSS growth under 50 MB, fds and threads flat, latency flat (`bench --soak` runs the same
checks for 10 minutes on the real pipeline)."""

from pathlib import Path

import pytest

from bench.soak_bench import SoakConfig, format_table, soak_in_process
from tests.fakes_pipeline import FakePipeline, fake_binding
from tests.integration.daemon_harness import camera_frame


@pytest.mark.slow
async def test_sessions_joining_and_leaving_for_60_s_leak_nothing(media_dir: Path) -> None:
    frame = camera_frame(media_dir)
    config = SoakConfig(seconds=60.0, sessions=4, fps=15.0, life_s=(2.0, 5.0), window_s=15.0)
    pipeline = FakePipeline(delay_s=0.005)
    result = await soak_in_process(
        fake_binding(pipeline), lambda index: frame, (media_dir / "fr_biden2.jpg").read_bytes(), config
    )
    report = format_table(result)
    print(report)
    assert len(result.windows) == 4, report
    assert result.calls_opened >= 40, report  # about one call per seat every 4 s
    assert all(window.frames_received > 0 for window in result.windows), report
    assert result.checks() == {name: True for name in result.checks()}, report
