"""`process_batch` over several streams: one detector run per batch for all streams due to detect, one
landmarker run for every stream's faces, and the same swaps as running each stream on its own."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import run_stream
from bench.clients.frames import SOURCE_PHOTO, TARGET_PHOTO, panning_face_frames
from streamer.pipeline.frame_pipeline import FrameJob, FramePipeline
from streamer.pipeline.image_input import read_image_file
from streamer.pipeline.pipeline_settings import PipelineConfig, SwapSettings

STREAMS = 3
FRAMES = 5


@pytest.fixture(scope="module")
def pipeline(models_dir: Path) -> FramePipeline:
    return FramePipeline.load(
        models_dir, PipelineConfig(execution_provider="cpu", engine="mesh", intra_op_threads=1)
    )


def test_streams_share_one_detector_run_and_swap_as_alone(
    pipeline: FramePipeline, media_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = SwapSettings(engine="mesh")
    source = pipeline.prepare_source(read_image_file(media_dir / SOURCE_PHOTO), settings)
    photo = read_image_file(media_dir / TARGET_PHOTO)
    clips = [panning_face_frames(photo, 480, 360, FRAMES + offset)[:FRAMES] for offset in range(STREAMS)]

    alone = []
    for clip in clips:
        stream = pipeline.new_stream()
        alone.append([pipeline.process(FrameJob(frame, stream, source, settings)) for frame in clip])

    batch_sizes: list[int] = []
    mesh_batches: list[int] = []
    detect_batch, mesh_batch = pipeline.detector.detect_batch, pipeline.landmarker.detect_batch

    def counting(frames: Any, **kwargs: Any) -> Any:
        batch_sizes.append(len(frames))
        return detect_batch(frames, **kwargs)

    def counting_meshes(frames: Any, points: Any, boxes: Any) -> Any:
        mesh_batches.append(len(frames))
        return mesh_batch(frames, points, boxes)

    monkeypatch.setattr(pipeline.detector, "detect_batch", counting)
    monkeypatch.setattr(pipeline.landmarker, "detect_batch", counting_meshes)
    monkeypatch.setattr(pipeline.landmarker, "detect", lambda *args: pytest.fail("a stream meshed alone"))
    streams = [pipeline.new_stream() for _ in clips]
    together: list[list[Any]] = [[] for _ in clips]
    for step in range(FRAMES):
        jobs = [FrameJob(clip[step], stream, source, settings) for clip, stream in zip(clips, streams)]
        for outputs, output in zip(together, pipeline.process_batch(jobs)):
            outputs.append(output)

    assert pipeline.landmarker.fixed_batch is None  # the batch-1 face mesh file runs from a batched copy
    detect_every = pipeline.config.detect_every
    assert batch_sizes == [STREAMS] * len(range(0, FRAMES, detect_every))  # one run per detection frame
    assert all(stream.tracker.detections_run == 0 for stream in streams)  # none detected on its own
    assert mesh_batches == [STREAMS] * FRAMES  # every frame of every stream meshed in one run per step
    for clip, single, batched in zip(clips, alone, together):
        for frame, expected, found in zip(clip, single, batched):
            assert np.abs(expected.astype(np.int16) - frame).mean() > 1.0  # swapped
            difference = np.abs(found.astype(np.int16) - expected.astype(np.int16))
            assert difference.max() <= 3 and difference.mean() < 0.05  # batched float sums may round apart


def test_bench_streams_reports_both_modes(models_dir: Path, media_dir: Path, tmp_path: Path) -> None:
    output = tmp_path / "batching.json"
    arguments = ["bench", "--models-dir", str(models_dir), "--media-dir", str(media_dir), "--frames", "3"]
    arguments += [
        "--streams",
        "2",
        "--rounds",
        "1",
        "--width",
        "320",
        "--height",
        "240",
        "--output",
        str(output),
    ]
    assert run_stream.main(arguments) == 0
    result = json.loads(output.read_text())
    assert result["streams"] == 2 and result["size"] == "320x240"
    assert all(len(values) == 1 and values[0] > 0 for values in result["ms_per_frame"].values())
    assert set(result["ms_per_frame"]) == {"batched", "one call each"}
