"""The GPU frame path: a frame crosses the bus exactly twice, and it matches the CPU path."""

from typing import Any

import numpy as np
import pytest

from bench.gpu_bench import FramePath, load_swapper, synthetic_i420
from bench.synthetic_swapper import build_synthetic_swapper
from gpu_ops.colorspace import i420_to_rgb
from streamer.pipeline.compute_backend import ComputeBackend
from streamer.realtime.device_frames import CupyTransfers, DeviceFrames, I420Planes
from tests.gpu.conftest import TransferSpy

pytestmark = pytest.mark.gpu

WIDTH, HEIGHT = 1280, 720


def test_device_frames_cross_twice_and_round_trip(gpu_backend: ComputeBackend) -> None:
    frames = DeviceFrames(CupyTransfers(gpu_backend.stream))
    planes = synthetic_i420(WIDTH, HEIGHT, seed=0)
    with gpu_backend.stream:
        device = frames.upload(planes)
        assert device.y.strides == planes.y.strides  # pitched, not repacked
        out = frames.download(I420Planes(*device))
        frames.finish()
    for sent, received in zip(planes, out):
        np.testing.assert_array_equal(received, sent)
    assert (frames.ledger.uploads, frames.ledger.downloads) == (1, 1)


def test_inswapper_frame_path_crosses_the_bus_exactly_twice(
    gpu_backend: ComputeBackend, spy: TransferSpy, tmp_path: Any
) -> None:
    swapper = load_swapper(gpu_backend, build_synthetic_swapper(1.0 / 16), tmp_path)
    path = FramePath(gpu_backend, "inswapper", swapper)
    inputs = [synthetic_i420(WIDTH, HEIGHT, seed=index) for index in range(3)]
    path.run_batch(inputs[:1])  # warm-up (kernel compiles, constant uploads)
    spy.sizes.clear()
    for index in range(5):
        path.run_batch([inputs[index % 3]])
    ledger = path.sessions[0].ledger
    assert (ledger.uploads, ledger.downloads) == (6, 6)
    assert spy.frame_sized() == []  # nothing frame-sized moved outside DeviceFrames
    assert sum(size for _, size in spy.sizes) < 5 * 64 * 1024  # only matrices/latents


def test_gpu_frame_path_matches_the_cpu_path(
    gpu_backend: ComputeBackend, cpu_backend: ComputeBackend, tmp_path: Any
) -> None:
    built = build_synthetic_swapper(1.0 / 16)
    gpu_swapper = load_swapper(gpu_backend, built, tmp_path)
    cpu_swapper = load_swapper(cpu_backend, built, tmp_path)
    planes = synthetic_i420(WIDTH, HEIGHT, seed=5)
    (gpu_out,) = FramePath(gpu_backend, "inswapper", gpu_swapper).run_batch([planes])
    (cpu_out,) = FramePath(cpu_backend, "inswapper", cpu_swapper).run_batch([planes])
    difference = np.abs(i420_to_rgb(*gpu_out).astype(int) - i420_to_rgb(*cpu_out).astype(int))
    assert np.percentile(difference, 99.9) <= 2  # model maths (TF32/cuDNN) may move a few pixels
    assert difference.mean() < 0.1
