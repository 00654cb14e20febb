"""`run_stream.py bench --live` end to end: the real daemon as a child process, the real models, a short
run of both phases, the JSON report."""

import json
from pathlib import Path

import pytest

import run_stream

pytestmark = pytest.mark.slow


def test_live_bench_reports_latency_for_passthrough_and_mesh(
    models_dir: Path, media_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "live.json"
    argv = [
        "bench", "--live", "--seconds", "2", "--engine", "mesh",
        "--models-dir", str(models_dir), "--media-dir", str(media_dir), "--output", str(output),
    ]  # fmt: skip
    assert run_stream.main(argv) == 0

    report = json.loads(output.read_text())
    assert report["size"] == "640x480" and report["fps"] == 30.0
    phases = {phase["name"]: phase for phase in report["phases"]}
    assert set(phases) == {"passthrough", "mesh"}
    for phase in phases.values():
        assert phase["received"] > 10, phase  # 2 s at 30 fps: ~60 sent, a loaded CI box returns fewer
        assert phase["received"] - phase["unreadable"] > 10, phase  # stamps survive the swap
        assert phase["duplicates"] == 0 and phase["out_of_order"] == 0, phase
        assert 0 < phase["p50_ms"] <= phase["p95_ms"] <= phase["max_ms"] < 5000, phase
    table = capsys.readouterr().out
    assert "passthrough" in table and "mesh" in table
