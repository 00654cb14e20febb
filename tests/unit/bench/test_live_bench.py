"""The live bench's bookkeeping: per-phase counts and percentiles, and the printed table."""

import os
import time

import pytest

from bench.clients.peer_client import LiveResult
from bench.live_bench import LiveRun, PhaseResult, _swap_summary, format_table, summarise_phase
from bench.process_cpu import cpu_seconds


def _result(latencies: tuple[float, ...], sent: int, received: int, unreadable: int = 0) -> LiveResult:
    return LiveResult(
        sent=sent,
        received=received,
        unreadable=unreadable,
        duplicates=0,
        out_of_order=0,
        latencies_ms=latencies,
    )


def test_phase_counts_only_frames_sent_during_the_phase() -> None:
    latencies = tuple(float(ms) for ms in range(10, 110))  # 100 readable frames, 10..109 ms
    phase = summarise_phase("mesh", _result(latencies, sent=460, received=102, unreadable=2), 160, 10.0, 3)
    assert phase.sent == 300
    assert phase.received == 102 and phase.unreadable == 2
    assert phase.server_dropped == 3
    assert phase.fps_received == pytest.approx(10.2)
    assert phase.p50_ms == pytest.approx(59.5)
    assert phase.p95_ms == pytest.approx(104.05)
    assert phase.max_ms == 109.0


def test_phase_without_readable_stamps_has_no_latency() -> None:
    phase = summarise_phase("passthrough", _result((), sent=30, received=5, unreadable=5), 0, 1.0, 0)
    assert phase.p50_ms is None and phase.p95_ms is None and phase.max_ms is None


def test_table_has_one_row_per_phase_and_dashes_for_missing_latency() -> None:
    phases = [
        PhaseResult("passthrough", 10.0, 300, 298, 0, 0, 0, 0, 29.8, 14.25, 21.0, 30.5, 3.25),
        PhaseResult("mesh", 10.0, 300, 240, 240, 0, 0, 55, 24.0, None, None, None, daemon_cpu_percent=95.2),
    ]
    lines = format_table(phases, "header").splitlines()
    assert lines[0] == "header"
    assert lines[1].split() == [
        "phase",
        "sent",
        "recv",
        "unread",
        "dropped",
        "fps",
        "p50",
        "ms",
        "p95",
        "ms",
        "max",
        "ms",
        "server",
        "ms",
        "q1",
        "p50",
        "q4",
        "p50",
        "cpu",
        "%",
    ]
    assert lines[2].split() == [
        "passthrough", "300", "298", "0", "0", "29.8", "14.2", "21.0", "30.5", "3.2", "-", "-", "-"
    ]  # fmt: skip
    assert lines[3].split() == ["mesh", "300", "240", "240", "55", "24.0", "-", "-", "-", "-", "-", "-", "95"]


def test_quarters_show_latency_creeping_up() -> None:
    latencies = tuple([40.0] * 25 + [60.0] * 50 + [90.0] * 25)
    phase = summarise_phase("mesh", _result(latencies, sent=100, received=100), 0, 3.3, 0, call=1)
    assert (phase.first_quarter_p50_ms, phase.last_quarter_p50_ms) == (40.0, 90.0)
    assert phase.call == 1


def test_several_calls_are_told_apart_in_the_table() -> None:
    phases = [
        PhaseResult("mesh", 10.0, 300, 100, 0, 0, 0, 200, 10.0, 150.0, 200.0, 250.0, call=call)
        for call in range(2)
    ]
    rows = format_table(phases, "header").splitlines()[2:]
    assert [row.split()[0] for row in rows] == ["mesh#1", "mesh#2"]


def test_summary_takes_medians_per_daemon_over_rounds() -> None:
    def run(label: str, round_index: int, fps: float, p50: float) -> LiveRun:
        swap = PhaseResult("mesh", 10.0, 300, int(fps * 10), 0, 0, 0, 0, fps, p50, p50 * 1.5, p50 * 2)
        passthrough = PhaseResult("passthrough", 10.0, 300, 300, 0, 0, 0, 0, 30.0, 15.0, 20.0, 25.0)
        return LiveRun(label, round_index, [passthrough, swap])

    runs = [run("baseline abc", 0, 20.0, 120.0), run("current", 0, 29.0, 40.0), run("current", 1, 28.0, 50.0)]
    runs.append(run("baseline abc", 1, 22.0, 100.0))
    summary = _swap_summary(runs)
    assert summary["current"] == {
        "fps": 28.5, "p50_ms": 45.0, "p95_ms": 67.5, "passthrough_p50_ms": 15.0, "daemon_cpu_percent": None
    }  # fmt: skip
    assert summary["baseline abc"]["fps"] == 21.0 and summary["baseline abc"]["p50_ms"] == 110.0


def test_process_cpu_is_read_from_proc() -> None:
    """The bench's CPU column: this process's own CPU time grows while it computes."""
    before = cpu_seconds(os.getpid())
    if before is None:
        pytest.skip("no /proc here")
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    after = cpu_seconds(os.getpid())
    assert after is not None and after - before >= 0.1
    assert cpu_seconds(2**22 + 12345) is None  # no such process
