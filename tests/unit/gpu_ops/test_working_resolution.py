"""The working-resolution composite: exact where nothing is pasted, the small swap where it is, and the
target's own fine detail kept where the target stays."""

import cv2
import numpy as np
import pytest

from gpu_ops.errors import InvalidInputError
from gpu_ops.working_resolution import (
    SLACK,
    UPSAMPLING,
    WHOLE_FLOOR,
    composite_working_resolution,
    scale_mesh,
    shrink,
    whole_factor,
    working_size,
)


def textured(height: int, width: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_a_box_within_the_cap_and_its_slack_is_swapped_as_it_is() -> None:
    assert working_size((300, 250), 288) is None  # within 15 %: resampling would cost more than it saves
    assert working_size((int(288 * SLACK), 100), 288) is None
    assert working_size((480, 430), None) is None
    assert working_size((480, 430), 288) == (288, 258)
    assert working_size((430, 480), 288) == (258, 288)
    with pytest.raises(InvalidInputError, match="too small"):
        working_size((480, 430), 8)


def test_nothing_pasted_leaves_the_region_bit_exact() -> None:
    region = textured(480, 430)
    before = region.copy()
    small = shrink(region, (258, 288))
    composite_working_resolution(region, small, small.copy(), np.zeros((288, 258), np.float32))
    np.testing.assert_array_equal(region, before)


def test_where_the_source_shows_fully_the_region_is_the_upsampled_swap() -> None:
    region = textured(480, 430)
    small_target = shrink(region, (258, 288))
    swapped = textured(288, 258, seed=1)
    composite_working_resolution(region, small_target, swapped, np.ones((288, 258), np.float32))
    expected = cv2.resize(swapped, (430, 480), interpolation=UPSAMPLING)
    assert np.abs(region.astype(int) - expected).max() <= 1


def test_the_target_keeps_its_fine_detail_where_half_of_it_stays() -> None:
    """Half alpha: the result is half the upsampled swap plus half the target's own image, within a
    level, so the target's fine texture (lost in the small copy) is still there at half strength."""
    region = textured(200, 200)
    target = region.astype(np.float32)
    small_target = shrink(region, (100, 100))
    swapped = np.full((100, 100, 3), 128, np.uint8)
    composite_working_resolution(region, small_target, swapped, np.full((100, 100), 0.5, np.float32))
    up_target = cv2.resize(small_target, (200, 200), interpolation=UPSAMPLING).astype(np.float32)
    expected = 128 + 0.5 * (target - up_target)
    assert np.abs(region - np.clip(expected, 0, 255)).max() <= 1.5


def test_shapes_that_do_not_match_are_refused() -> None:
    region = textured(100, 100)
    with pytest.raises(InvalidInputError, match="shapes differ"):
        composite_working_resolution(
            region, textured(50, 50), textured(50, 40), np.ones((50, 50), np.float32)
        )


def test_mesh_points_land_where_cv2_resize_puts_their_pixel() -> None:
    """A bright 4x4 block centred on a mesh point of the full region has its centroid at the scaled
    point in the small copy (the pixel-centre mapping cv2.resize uses); z scales with the axes."""
    region = np.zeros((400, 300, 3), np.uint8)
    points = np.array([[100.5, 200.5, 10.0], [250.5, 50.5, -4.0]], np.float32)
    for x, y, _ in points:
        region[int(y) - 1 : int(y) + 3, int(x) - 1 : int(x) + 3] = 255
    small_size = (150, 200)
    scaled = scale_mesh(points, (300, 400), small_size)
    small = shrink(region, small_size)[..., 0].astype(np.float64)
    for sx, sy, _ in scaled:
        x0, y0 = int(sx) - 4, int(sy) - 4
        window = small[y0 : y0 + 9, x0 : x0 + 9]
        rows, cols = np.mgrid[y0 : y0 + 9, x0 : x0 + 9]
        centroid = ((window * cols).sum() / window.sum(), (window * rows).sum() / window.sum())
        assert abs(centroid[0] - sx) < 0.05 and abs(centroid[1] - sy) < 0.05
    np.testing.assert_allclose(scaled[:, 2], points[:, 2] * 0.5)


def test_a_box_near_a_whole_multiple_of_the_cap_is_shrunk_by_that_factor() -> None:
    """A whole factor where it lands the box between WHOLE_FLOOR and SLACK times the cap; none within the
    cap's slack, none where the nearest whole factor would shrink the face too far."""
    assert whole_factor((450, 520), 288) == 2  # a 720p close-up: 260 px
    assert whole_factor((690, 790), 288) == 3  # a 1080p close-up: 263 px
    assert whole_factor((300, 250), 288) is None  # swapped as it is
    assert whole_factor((400, 380), 288) is None  # 200 px would be under 0.8 x 288: fractional
    assert whole_factor((450, 520), None) is None
    assert 288 * WHOLE_FLOOR <= 520 / 2 <= 288 * SLACK


def test_a_whole_factor_shrink_is_the_block_mean() -> None:
    region = textured(520, 450)
    small = shrink(region, (225, 260)).astype(np.float64)
    blocks = region.reshape(260, 2, 225, 2, 3).astype(np.float64).mean(axis=(1, 3))
    assert np.abs(small - blocks).max() <= 0.5 + 1e-9
