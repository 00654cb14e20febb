"""Masks: filled outlines, exact-width feathers and the in-place blend (the skin test: test_skin_model.py)."""

import numpy as np
import pytest

from gpu_ops.backend import cupy_available
from gpu_ops.errors import InvalidFrameError
from gpu_ops.masks import (
    blend,
    blend_cpu,
    feather_inside_cpu,
    feather_outside_cpu,
    fill_polygons,
    fill_polygons_cpu,
    smoothstep,
)

CUPY_OK, CUPY_REASON = cupy_available()
SQUARE = np.array([[20, 20], [79, 20], [79, 79], [20, 79]], np.float32)


def test_fill_polygons_fills_the_square_inclusive() -> None:
    mask = fill_polygons_cpu((100, 100), [SQUARE])
    assert mask.dtype == np.uint8 and set(np.unique(mask)) == {0, 255}
    assert (mask[20:80, 20:80] == 255).all() and mask.sum() == 60 * 60 * 255


def test_fill_polygons_takes_the_union_of_overlapping_polygons() -> None:
    shifted = SQUARE + 30.0
    mask = fill_polygons_cpu((120, 120), [SQUARE, shifted])
    assert (mask[55:75, 55:75] == 255).all()  # the overlap stays filled
    assert mask.sum() == (2 * 60 * 60 - 30 * 30) * 255


def test_smoothstep_is_clamped_and_monotonic() -> None:
    values = smoothstep(np.linspace(-1, 2, 31, dtype=np.float32))
    assert values[0] == 0 and values[-1] == 1 and (np.diff(values) >= 0).all()


def test_feather_inside_is_zero_outside_and_one_beyond_the_width() -> None:
    alpha = feather_inside_cpu(fill_polygons_cpu((100, 100), [SQUARE]), 10.0)
    assert alpha[10, 50] == 0 and alpha[19, 50] == 0
    assert alpha[50, 50] == 1 and alpha[31, 50] == 1
    ramp = alpha[20:31, 50]
    assert (np.diff(ramp) >= 0).all() and 0 < ramp[0] < ramp[4] < ramp[8] < 1


def test_feather_inside_width_may_vary_per_pixel() -> None:
    region = fill_polygons_cpu((100, 100), [SQUARE])
    widths = np.where(np.arange(100)[:, None] < 50, 25.0, 5.0).astype(np.float32) * np.ones(
        (1, 100), np.float32
    )
    alpha = feather_inside_cpu(region, widths)
    assert alpha[26, 50] < 0.3  # 7 px below the top edge, 25-px feather
    assert alpha[72, 50] == 1  # 7 px above the bottom edge, 5-px feather


def test_feather_outside_keeps_the_margin_and_fades_to_zero() -> None:
    alpha = feather_outside_cpu(fill_polygons_cpu((100, 100), [SQUARE]), 3.0, 6.0)
    assert alpha[50, 50] == 1 and alpha[50, 82] == 1  # inside, and 3 px outside
    assert 0 < alpha[50, 85] < 1 and alpha[50, 89] == 0 and alpha[5, 5] == 0


def test_blend_writes_only_into_the_view() -> None:
    frame = np.full((40, 40, 3), 100, np.uint8)
    patch = np.full((10, 10, 3), 200, np.uint8)
    alpha = np.zeros((10, 10), np.float32)
    alpha[:, 5:] = 1.0
    alpha[:, 4] = 0.5
    before = frame.copy()
    blend_cpu(frame[10:20, 10:20], patch, alpha)
    assert (frame[10:20, 15:20] == 200).all() and (frame[10:20, 10:14] == 100).all()
    assert (frame[10:20, 14] == 150).all()
    outside = np.ones((40, 40), bool)
    outside[10:20, 10:20] = False
    np.testing.assert_array_equal(frame[outside], before[outside])


def test_blend_dispatcher_matches_cpu_and_checks_shapes() -> None:
    rng = np.random.default_rng(2)
    region = rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)
    patch = rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)
    alpha = rng.uniform(0, 1, (6, 7)).astype(np.float32)
    expected = region.copy()
    blend_cpu(expected, patch, alpha)
    blend(region, patch, alpha)
    np.testing.assert_array_equal(region, expected)
    with pytest.raises(InvalidFrameError):
        blend_cpu(region, patch[:5], alpha)


@pytest.mark.gpu
@pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)
def test_fill_polygons_on_the_device_fills_the_same_pixels() -> None:
    import cupy

    inside = np.array([[10.3, 12.1], [40.7, 8.9], [35.2, 30.4], [22.6, 18.8], [12.4, 33.3]], np.float32)
    leaving = inside + np.array([30.0, 0.0], np.float32)  # reaches past the right edge: host fill
    for polygons in ([inside], [inside, leaving]):
        result = fill_polygons((56, 40), polygons, on_device=True)
        assert isinstance(result, cupy.ndarray)
        np.testing.assert_array_equal(cupy.asnumpy(result), fill_polygons_cpu((56, 40), polygons))
