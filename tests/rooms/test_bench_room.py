"""`run_stream.py bench --room` end to end: its own namespace, a real Janus, the real daemon and models,
a short run of the three phases, the JSON report."""

import json
from pathlib import Path

import pytest

import run_stream
from bench.clients.janus_server import janus_missing_reason
from bench.clients.network_namespace import unavailable_reason

pytestmark = pytest.mark.slow


def test_room_bench_reports_direct_janus_and_room_latency_passed_through_and_swapped(
    models_dir: Path, media_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = unavailable_reason() or janus_missing_reason()
    if reason:
        pytest.skip(reason)
    output = tmp_path / "room.json"
    argv = [
        "bench", "--room", "--seconds", "2", "--models-dir", str(models_dir),
        "--media-dir", str(media_dir), "--output", str(output),
    ]  # fmt: skip
    assert run_stream.main(argv) == 0
    report = json.loads(output.read_text())
    phases = {phase["name"]: phase for phase in report["phases"]}
    assert set(phases) == {"direct pass", "direct swap", "janus", "room pass", "room swap"}
    for phase in phases.values():
        assert phase["stamped"] > 5, phase  # 2 s at 30 fps; a loaded box swaps fewer
        assert 0 < phase["p50_ms"] <= phase["p95_ms"] <= phase["max_ms"] < 5000, phase
    for kind in ("pass", "swap"):
        expected = round(phases[f"room {kind}"]["p50_ms"] - phases[f"direct {kind}"]["p50_ms"], 1)
        assert report["room_minus_direct_p50_ms"][kind] == expected
    assert "room - direct p50" in capsys.readouterr().out
