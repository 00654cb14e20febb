"""The occlusion mask back at the face box's size: the generic path equals OpenCV's resize."""

import numpy as np
import pytest

from gpu_ops.errors import InvalidFrameError
from gpu_ops.occlusion_mask import show_weight, show_weight_cpu, show_weight_generic


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
