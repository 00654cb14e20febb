"""The occlusion mask's array ops: the generic paths (what the device runs) equal the OpenCV ones."""

import numpy as np
import pytest

from gpu_ops.errors import InvalidFrameError
from gpu_ops.occlusion_mask import (
    cell_average,
    cell_average_cpu,
    cell_average_generic,
    show_weight,
    show_weight_cpu,
    show_weight_generic,
)


@pytest.mark.parametrize("size", [(97, 131), (40, 30), (25, 25)])
def test_generic_path_matches_the_opencv_path(size: tuple[int, int]) -> None:
    rng = np.random.default_rng(7)
    mask = rng.random((25, 25), dtype=np.float32)
    mask[5:12, 3:20] = 1.0
    expected = show_weight_cpu(mask, size, 0.8)
    assert expected.shape == (size[1], size[0])
    np.testing.assert_allclose(show_weight_generic(np, mask, size, 0.8), expected, atol=2e-3)


def test_an_occluder_shows_none_of_the_swap_and_a_clear_pixel_the_faded_share() -> None:
    mask = np.zeros((10, 10), np.float32)
    mask[:, :5] = 1.0
    weight = show_weight(mask, (40, 40), 0.5, np.zeros((40, 40, 3), np.uint8))
    assert weight[:, :18].max() == 0.0 and np.allclose(weight[:, 22:], 0.5)


def test_bad_masks_are_refused() -> None:
    with pytest.raises(InvalidFrameError):
        show_weight_cpu(np.zeros((4, 4), np.float64), (8, 8), 1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidFrameError):
        show_weight_cpu(np.zeros((4, 4), np.float32), (0, 8), 1.0)


@pytest.mark.parametrize(("shape", "factor"), [((286, 234), 5), ((60, 48), 4), ((61, 47), 3), ((10, 12), 1)])
def test_cell_average_generic_matches_opencv_area_resize(shape: tuple[int, int], factor: int) -> None:
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    expected = cell_average_cpu(image, factor)
    assert expected.shape == (-(-shape[0] // factor), -(-shape[1] // factor), 3)
    generic = cell_average_generic(np, image, factor)
    assert np.abs(generic.astype(np.int16) - expected).max() <= 1
    assert np.array_equal(cell_average(image, factor), expected)  # the host dispatch is the OpenCV path


def test_a_cell_is_the_mean_of_its_pixels_and_a_partial_cell_repeats_the_edge() -> None:
    image = np.zeros((5, 4, 3), np.uint8)
    image[:4, :4] = 40
    image[4, :] = 200  # the last row: alone in a partial cell, repeated to fill it
    small = cell_average_cpu(image, 4)
    assert small.shape == (2, 1, 3) and small[0, 0, 0] == 40 and small[1, 0, 0] == 200
