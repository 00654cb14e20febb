"""The device's rule for a swapped frame, on CuPy: the decoder's planes wherever the swap changed
nothing, the changed pixels converted on the device, bit for bit what the NumPy mirror gives, and still
one copy down per frame."""

from fractions import Fraction

import numpy as np
from av import VideoFrame

from gpu_ops.backend import require_cupy
from gpu_ops.colorspace import i420_to_rgb_cpu, rgb_to_i420_cpu
from gpu_ops.i420_patch import Box, Planes, merged_i420
from streamer.pipeline.compute_backend import ComputeBackend
from streamer.realtime.device_frames import CupyTransfers, HostTransfers, planes_of_video_frame
from streamer.realtime.frame_conversion import DeviceFrameConversion

WIDTH, HEIGHT = 1280, 720


def _decoded(seed: int) -> Planes:
    rgb = np.random.default_rng(seed).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    return Planes(*rgb_to_i420_cpu(rgb))


def _swap(rgb: object) -> object:
    output = rgb.copy()  # type: ignore[attr-defined]
    output[181:433, 401:655] = 255 - output[181:433, 401:655]
    output[500:611, 1001:1113, 1] //= 3
    return output


def test_merged_i420_on_cupy_is_the_numpy_mirror(gpu_backend: ComputeBackend) -> None:
    cupy = require_cupy()
    decoded = _decoded(seed=3)
    before = i420_to_rgb_cpu(*decoded)
    after = _swap(before)
    label = [Box(1100, 680, 1240, 712)]
    on_host = merged_i420(decoded, before, after, label)
    with gpu_backend.stream:
        on_device = merged_i420(
            Planes(*(cupy.asarray(plane) for plane in decoded)),
            cupy.asarray(before),
            cupy.asarray(after),
            label,
        )
        gpu_backend.stream.synchronize()
    for device_plane, host_plane in zip(on_device, on_host):
        np.testing.assert_array_equal(cupy.asnumpy(device_plane), host_plane)


def test_device_conversion_keeps_the_decoded_planes_in_one_copy_down(gpu_backend: ComputeBackend) -> None:
    cupy = require_cupy()
    decoded = _decoded(seed=4)
    packed = np.concatenate([plane.ravel() for plane in decoded]).reshape(HEIGHT * 3 // 2, WIDTH)
    like = VideoFrame.from_ndarray(packed, format="yuv420p")
    like.pts, like.time_base = 9000, Fraction(1, 90000)
    on_gpu = DeviceFrameConversion(CupyTransfers(gpu_backend.stream))
    mirror = DeviceFrameConversion(HostTransfers())
    with gpu_backend.stream:
        rgb = on_gpu.to_pipeline("a", like)
        out = on_gpu.to_video_frame("a", _swap(rgb), like, source=rgb)
        assert on_gpu.to_video_frame("a", rgb, like, source=rgb) is like
    mirror_rgb = mirror.to_pipeline("a", like)
    expected = mirror.to_video_frame("a", _swap(mirror_rgb), like, source=mirror_rgb)
    np.testing.assert_array_equal(cupy.asnumpy(rgb), mirror_rgb)
    for got, want in zip(planes_of_video_frame(out), planes_of_video_frame(expected)):
        np.testing.assert_array_equal(got, want)
    changed = np.ones((HEIGHT, WIDTH), bool)
    changed[181:433, 401:655] = changed[500:611, 1001:1113] = False
    np.testing.assert_array_equal(planes_of_video_frame(out).y[changed], decoded.y[changed])
    assert (on_gpu.ledger.uploads, on_gpu.ledger.downloads) == (1, 1)
    assert out.pts == 9000
