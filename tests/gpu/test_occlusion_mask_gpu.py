"""The occlusion mask's device paths (CuPy) against the OpenCV paths."""

import numpy as np

from gpu_ops.occlusion_mask import cell_average, cell_average_cpu, show_weight, show_weight_cpu


def test_device_show_weight_matches_the_host_path() -> None:
    import cupy

    rng = np.random.default_rng(3)
    mask = rng.random((48, 40), dtype=np.float32)
    region = cupy.zeros((190, 160, 3), cupy.uint8)
    on_device = show_weight(mask, (160, 190), 0.7, region)
    assert isinstance(on_device, cupy.ndarray) and on_device.dtype == cupy.float32
    np.testing.assert_allclose(cupy.asnumpy(on_device), show_weight_cpu(mask, (160, 190), 0.7), atol=2e-3)


def test_device_cell_average_matches_the_host_and_comes_back_small() -> None:
    import cupy

    rng = np.random.default_rng(4)
    image = rng.integers(0, 256, (286, 234, 3), dtype=np.uint8)
    small = cell_average(cupy.asarray(image), 5)
    assert isinstance(small, np.ndarray) and small.shape == (58, 47, 3)
    assert np.abs(small.astype(np.int16) - cell_average_cpu(image, 5)).max() <= 1
