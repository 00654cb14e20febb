"""`bench --gpu --quick` runs its whole logic on the CPU mirrors and writes JSON + markdown rows."""

import json
from pathlib import Path

import numpy as np
import pytest

import run_stream
from bench.gpu_bench import FramePath, grid_triangles, synthetic_i420, time_buckets
from bench.stream_capacity import max_streams_held
from gpu_ops.colorspace import i420_to_rgb, rgb_to_i420
from models.errors import GpuUnavailableError
from streamer.pipeline.compute_backend import choose_backend


def test_quick_gpu_bench_writes_results(tmp_path: Path, models_dir: Path, media_dir: Path) -> None:
    exit_code = run_stream.main(
        [
            "bench", "--gpu", "--quick", "--output-dir", str(tmp_path),
            "--models-dir", str(models_dir), "--media-dir", str(media_dir),
        ]
    )  # fmt: skip
    assert exit_code == 0
    report = json.loads((tmp_path / "gpu_bench.json").read_text())
    by_name = {workload["workload"]: workload for workload in report["workloads"]}
    assert set(by_name) == {"inswapper", "mesh", "daemon_mesh"}
    daemon = by_name["daemon_mesh"]
    assert daemon["frame_path"] in ("host", "device (cupy)")
    assert list(daemon["sizes"][0]["stages_ms"]) == ["convert_in", "pipeline", "convert_out"]
    inswapper = by_name["inswapper"]
    assert list(inswapper["sizes"][0]["stages_ms"]) == [
        "upload", "i420_to_rgb", "crop", "swap_model", "paste_back", "rgb_to_i420", "download"
    ]  # fmt: skip
    assert inswapper["gflops_per_face"] > 0 and inswapper["parameters_m"] > 0
    assert set(inswapper["batch_ms"]) == {"1", "2", "4", "8", "16"}
    for workload in report["workloads"]:  # the stream count is the replay of the measured batch times
        batch_seconds = {int(bucket): value for bucket, value in workload["batch_seconds"].items()}
        streams, capacity = max_streams_held(batch_seconds)
        assert workload["streams_held"] == streams
        assert (workload["capacity"] is None) == (capacity is None)
        if capacity is not None:
            assert workload["capacity"]["p95_latency_ms"] < 33.0
        for size in workload["sizes"]:
            assert size["fps"] == pytest.approx(1000.0 / size["latency_ms"], rel=0.01)
    rows = (tmp_path / "gpu_bench.md").read_text().splitlines()
    assert len(rows) == 2 + 3 * len(inswapper["sizes"])
    assert sum("| daemon_mesh |" in row for row in rows) == len(daemon["sizes"])


def test_daemon_workload_is_skipped_with_its_reason_without_photos(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LIVEFUSE_MEDIA", raising=False)
    assert run_stream.main(["bench", "--gpu", "--quick", "--output-dir", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_bench.json").read_text())
    daemon = next(workload for workload in report["workloads"] if workload["workload"] == "daemon_mesh")
    assert "--media-dir" in daemon["skipped"] and "sizes" not in daemon
    assert report["backend"]["array_backend"] in ("numpy", "cupy")


def test_frame_path_changes_only_the_face_region() -> None:
    path = FramePath(choose_backend("cpu"), "mesh", None)
    planes = synthetic_i420(320, 240, seed=3)
    (output,) = path.run_batch([planes])
    before = i420_to_rgb(*rgb_to_i420(i420_to_rgb(*planes)))  # the same colour round trip, no swap
    after = i420_to_rgb(*output)
    changed = np.argwhere(np.any(before != after, axis=2))
    assert len(changed) > 1000
    box = min(256, 238)
    y1, x1 = (240 - box) // 2, (320 - box) // 2
    assert changed[:, 0].min() >= y1 - 2 and changed[:, 0].max() < y1 + box + 2  # 2x2 chroma blocks
    assert changed[:, 1].min() >= x1 - 2 and changed[:, 1].max() < x1 + box + 2


def test_each_frame_of_a_batch_crosses_the_bus_twice() -> None:
    path = FramePath(choose_backend("cpu"), "mesh", None)
    time_buckets(path, (128, 96), repeats=1)
    ledgers = [frames.ledger for frames in path.sessions.values()]
    assert len(ledgers) == 16
    uses = [ledger.uploads for ledger in ledgers]
    assert all(ledger.uploads == ledger.downloads for ledger in ledgers)
    assert uses[0] == 2 * 5 and uses[-1] == 2  # session 0 is in every bucket, session 15 only in 16


def test_grid_triangles_cover_the_box_without_folds() -> None:
    triangles = grid_triangles(256, 21, 3.0)
    assert triangles.shape == (800, 3, 2)
    edges_1, edges_2 = triangles[:, 1] - triangles[:, 0], triangles[:, 2] - triangles[:, 0]
    signed = edges_1[:, 0] * edges_2[:, 1] - edges_1[:, 1] * edges_2[:, 0]
    assert np.all(signed > 0)


def test_explicit_cuda_bench_without_cuda_fails_with_the_fix(tmp_path: Path) -> None:
    if choose_backend("auto").on_gpu:
        pytest.skip("this machine has a working GPU path")
    with pytest.raises(GpuUnavailableError):
        choose_backend("cuda")
    exit_code = run_stream.main(
        ["bench", "--gpu", "--quick", "--execution-provider", "cuda", "--output-dir", str(tmp_path)]
    )
    assert exit_code == 1
    assert not (tmp_path / "gpu_bench.json").exists()
