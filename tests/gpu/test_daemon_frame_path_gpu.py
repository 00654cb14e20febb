"""The daemon's worker on the GPU: real models on the CUDA EP and the device frame conversion that
`--frame-path auto` picks there. A frame crosses the bus exactly twice (the source's textures once per
source), and the swap matches the CPU worker's."""

from pathlib import Path

import av
import numpy as np
import pytest

from bench.clients.frames import SOURCE_PHOTO, TARGET_PHOTO, panning_face_frames
from run_stream import build_parser
from streamer.pipeline.image_input import read_image_file
from streamer.realtime.frame_conversion import (
    DeviceFrameConversion,
    HostFrameConversion,
    choose_frame_conversion,
)
from streamer.realtime.pipeline_binding import PipelineBinding
from tests.gpu.conftest import TransferSpy
from tests.integration.daemon_harness import frames_through_worker
from web.serve import load_pipeline_binding

FRAMES = 8


def binding_on(models_dir: Path, provider: str) -> PipelineBinding:
    args = build_parser().parse_args(
        ["serve", "--models-dir", str(models_dir), "--engine", "mesh", "--execution-provider", provider]
    )
    return load_pipeline_binding(args)


@pytest.fixture(scope="module")
def gpu_binding(models_dir: Path) -> PipelineBinding:
    return binding_on(models_dir, "cuda")


@pytest.fixture(scope="module")
def cpu_binding(models_dir: Path) -> PipelineBinding:
    return binding_on(models_dir, "cpu")


def face_frames(media_dir: Path, width: int, height: int) -> list[av.VideoFrame]:
    photos = panning_face_frames(read_image_file(media_dir / TARGET_PHOTO), width, height, FRAMES)
    return [av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p") for rgb in photos]


@pytest.mark.parametrize("size", [(1280, 720), (1920, 1080)])
async def test_worker_frames_cross_twice_and_match_the_cpu_worker(
    gpu_binding: PipelineBinding,
    cpu_binding: PipelineBinding,
    media_dir: Path,
    spy: TransferSpy,
    size: tuple[int, int],
) -> None:
    frames = face_frames(media_dir, *size)
    source = read_image_file(media_dir / SOURCE_PHOTO)
    conversion = choose_frame_conversion("auto", gpu_binding.pipeline.backend)  # type: ignore[attr-defined]
    assert isinstance(conversion, DeviceFrameConversion) and conversion.describe() == "device (cupy)"
    spy.sizes.clear()
    on_gpu = await frames_through_worker(gpu_binding, conversion, frames, source)
    on_cpu = await frames_through_worker(cpu_binding, HostFrameConversion(), frames, source)

    assert (conversion.ledger.uploads, conversion.ledger.downloads) == (FRAMES, FRAMES)
    frame_bytes = size[0] * size[1] * 3 // 2
    assert conversion.ledger.download_bytes == FRAMES * frame_bytes
    texture_uploads = [entry for entry in spy.frame_sized(frame_bytes) if entry[0] == "host_to_device"]
    assert len(texture_uploads) <= 3, spy.frame_sized(
        frame_bytes
    )  # texture, cut texture, lips mask: once per source
    assert not [entry for entry in spy.frame_sized(frame_bytes) if entry[0] == "device_to_host"]
    for camera, gpu_frame, cpu_frame in zip(frames, on_gpu, on_cpu):
        original = camera.to_ndarray(format="rgb24").astype(np.int16)
        gpu_rgb = gpu_frame.to_ndarray(format="rgb24").astype(np.int16)
        cpu_rgb = cpu_frame.to_ndarray(format="rgb24").astype(np.int16)
        swapped = np.abs(cpu_rgb - original).mean(axis=2) > 25
        assert swapped.sum() > 5000
        assert np.abs(gpu_rgb - original).mean(axis=2)[swapped].mean() > 25  # the GPU swapped too
        assert np.abs(gpu_rgb - cpu_rgb).mean(axis=2)[swapped].mean() < 6.0
