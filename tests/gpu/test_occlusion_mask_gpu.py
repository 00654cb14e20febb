"""The occlusion mask's device path (CuPy) against the OpenCV path, and the engine's device swap with it."""

import numpy as np

from gpu_ops.occlusion_mask import show_weight, show_weight_cpu


def test_device_show_weight_matches_the_host_path() -> None:
    import cupy

    rng = np.random.default_rng(3)
    mask = rng.random((48, 40), dtype=np.float32)
    region = cupy.zeros((190, 160, 3), cupy.uint8)
    on_device = show_weight(mask, (160, 190), 0.7, region)
    assert isinstance(on_device, cupy.ndarray) and on_device.dtype == cupy.float32
    np.testing.assert_allclose(cupy.asnumpy(on_device), show_weight_cpu(mask, (160, 190), 0.7), atol=2e-3)
