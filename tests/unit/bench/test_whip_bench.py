"""bench --whip's summary and table (the measurement itself runs in the browser-free integration path)."""

from bench.whip_bench import format_whip_table, summarise_whip_phase


def test_summary_percentiles_and_rate() -> None:
    phase = summarise_whip_phase("mesh", 2.0, 60, 50, [float(v) for v in range(10, 110, 2)])
    assert (phase.published, phase.received, phase.stamped) == (60, 50, 50)
    assert phase.fps_received == 25.0
    assert phase.p50_ms == 59.0 and phase.max_ms == 108.0
    assert phase.p95_ms is not None and 100.0 <= phase.p95_ms <= 104.0


def test_summary_without_stamps_and_table() -> None:
    empty = summarise_whip_phase("passthrough", 0.0, 0, 0, [])
    assert empty.p50_ms is None and empty.fps_received == 0.0
    table = format_whip_table([empty, summarise_whip_phase("mesh", 1.0, 30, 30, [40.0])], "header")
    lines = table.splitlines()
    assert lines[0] == "header" and "p95 ms" in lines[1]
    assert lines[2].startswith("passthrough") and lines[2].rstrip().endswith("-")
    assert lines[3].startswith("mesh") and "40.0" in lines[3]
