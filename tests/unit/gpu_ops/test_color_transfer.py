"""Colour transfer: shading follows the target while detail stays; Lab stats match; weights matter."""

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.backend import cupy_available
from gpu_ops.color_transfer import (
    apply_shading_ratio,
    apply_shading_ratio_cpu,
    match_shading,
    match_shading_cpu,
    shading_grid,
    shading_ratio,
    shading_ratio_cpu,
    transfer_lab_statistics_cpu,
)
from gpu_ops.errors import InvalidFrameError

SIZE = 160
CUPY_OK, CUPY_REASON = cupy_available()


def detail(seed: int) -> NDArray[np.float32]:
    """Fine texture around 1.0 (what identity is made of)."""
    rng = np.random.default_rng(seed)
    return (1.0 + 0.12 * rng.standard_normal((SIZE, SIZE, 1))).astype(np.float32)


def light(direction: float, tint: tuple[float, float, float]) -> NDArray[np.float32]:
    """A smooth side light from left (direction 1) or right (-1), times a colour tint."""
    ramp = np.linspace(-1, 1, SIZE, dtype=np.float32)[None, :, None] * direction
    return ((0.75 + 0.35 * ramp) * np.array(tint, np.float32)).astype(np.float32)


def render(texture: NDArray[np.float32], lighting: NDArray[np.float32]) -> NDArray[np.uint8]:
    return np.clip(texture * lighting * 170.0, 0, 255).astype(np.uint8)


def high_pass(image: NDArray[np.uint8]) -> NDArray[np.float32]:
    value = image.astype(np.float32).mean(axis=2)
    return value - cv2.GaussianBlur(value, (0, 0), 3.0)


def test_match_shading_takes_the_target_light_and_keeps_the_source_detail() -> None:
    source_detail, target_detail = detail(1), detail(2)
    patch = render(source_detail, light(1.0, (1.0, 0.8, 0.7)))
    reference = render(target_detail, light(-1.0, (0.9, 0.9, 1.0)))
    ideal = render(source_detail, light(-1.0, (0.9, 0.9, 1.0)))
    weights = np.ones((SIZE, SIZE), np.float32)
    result = match_shading_cpu(patch, reference, weights, cell_px=16.0)
    error_before = np.abs(patch.astype(float) - ideal).mean()
    error_after = np.abs(result.astype(float) - ideal).mean()
    assert error_after < 0.25 * error_before
    correlation = np.corrcoef(high_pass(result).ravel(), high_pass(ideal).ravel())[0, 1]
    assert correlation > 0.9


def test_match_shading_ignores_pixels_with_zero_weight() -> None:
    patch = render(detail(3), light(0.0, (1.0, 1.0, 1.0)))
    reference = patch.copy()
    weights = np.ones((SIZE, SIZE), np.float32)
    weights[:, 120:] = 0.0
    reference[:, 120:] = 255  # bright background, not face
    result = match_shading_cpu(patch, reference, weights, cell_px=16.0)
    assert np.abs(result[:, :100].astype(int) - patch[:, :100]).max() <= 2


def test_ratio_then_apply_is_match_shading_and_takes_any_grid() -> None:
    patch = render(detail(7), light(1.0, (1.0, 0.8, 0.7)))
    reference = render(detail(8), light(-1.0, (0.9, 0.9, 1.0)))
    weights = np.ones((SIZE, SIZE), np.float32)
    grid = shading_grid((SIZE, SIZE), 20.0)
    ratio = shading_ratio_cpu(patch, reference, weights, grid)
    assert ratio.shape == (grid[1], grid[0], 3) and ratio.dtype == np.float32
    np.testing.assert_array_equal(
        apply_shading_ratio_cpu(patch, ratio), match_shading_cpu(patch, reference, weights, cell_px=20.0)
    )
    # a stream keeps its grid while the face box changes shape: any (gw, gh) is accepted
    uneven = shading_ratio(patch, reference, weights, (3, 7))
    assert uneven.shape == (7, 3, 3)
    relit = apply_shading_ratio(patch, uneven)
    assert relit.shape == patch.shape and np.abs(relit.astype(int) - patch).mean() > 5


def test_lab_transfer_matches_weighted_mean_and_spread() -> None:
    rng = np.random.default_rng(4)
    patch = rng.integers(40, 120, (64, 64, 3), dtype=np.uint8)
    reference = rng.integers(120, 220, (64, 64, 3), dtype=np.uint8)
    weights = np.ones((64, 64), np.float32)
    result = transfer_lab_statistics_cpu(patch, reference, weights)
    lab_result = cv2.cvtColor(result, cv2.COLOR_RGB2LAB).reshape(-1, 3).astype(float)
    lab_reference = cv2.cvtColor(reference, cv2.COLOR_RGB2LAB).reshape(-1, 3).astype(float)
    np.testing.assert_allclose(lab_result.mean(0), lab_reference.mean(0), atol=2.5)
    np.testing.assert_allclose(lab_result.std(0), lab_reference.std(0), rtol=0.15)


def test_shading_grid_has_at_least_two_cells() -> None:
    assert shading_grid((10, 10), 16.0) == (2, 2)
    assert shading_grid((200, 240), 20.0) == (10, 12)


def test_mismatched_inputs_raise_and_dispatcher_matches_cpu() -> None:
    image = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(InvalidFrameError):
        match_shading_cpu(image, image[:4], np.ones((8, 8), np.float32))
    with pytest.raises(InvalidFrameError):
        transfer_lab_statistics_cpu(image, image, np.ones((4, 8), np.float32))
    patch = render(detail(5), light(1.0, (1, 1, 1)))
    reference = render(detail(6), light(-1.0, (1, 1, 1)))
    weights = np.ones((SIZE, SIZE), np.float32)
    np.testing.assert_array_equal(
        match_shading(patch, reference, weights), match_shading_cpu(patch, reference, weights)
    )


@pytest.mark.gpu
@pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)
def test_match_shading_on_the_device_is_within_one_level() -> None:
    import cupy

    patch = render(detail(1), light(1.0, (1.0, 0.8, 0.7)))
    frame = np.zeros((SIZE + 8, SIZE + 12, 3), np.uint8)
    frame[4 : 4 + SIZE, 6 : 6 + SIZE] = render(detail(2), light(-1.0, (0.9, 0.85, 0.8)))
    weights = np.zeros((SIZE, SIZE), np.float32)
    cv2.circle(weights, (SIZE // 2, SIZE // 2), SIZE // 3, 1.0, -1)
    expected = match_shading_cpu(patch, frame[4 : 4 + SIZE, 6 : 6 + SIZE].copy(), weights, cell_px=14.0)
    device_frame = cupy.asarray(frame)
    result = match_shading(
        cupy.asarray(patch), device_frame[4 : 4 + SIZE, 6 : 6 + SIZE], cupy.asarray(weights), cell_px=14.0
    )
    assert isinstance(result, cupy.ndarray)
    assert np.abs(cupy.asnumpy(result).astype(int) - expected).max() <= 1


@pytest.mark.gpu
@pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)
def test_shading_ratio_and_apply_on_the_device_match_the_cpu() -> None:
    import cupy

    patch = render(detail(9), light(1.0, (1.0, 0.8, 0.7)))
    reference = render(detail(10), light(-1.0, (0.9, 0.85, 0.8)))
    weights = np.zeros((SIZE, SIZE), np.float32)
    cv2.circle(weights, (SIZE // 2, SIZE // 2), SIZE // 3, 1.0, -1)
    expected_ratio = shading_ratio_cpu(patch, reference, weights, (4, 5))
    ratio = shading_ratio(cupy.asarray(patch), cupy.asarray(reference), cupy.asarray(weights), (4, 5))
    np.testing.assert_allclose(cupy.asnumpy(ratio), expected_ratio, rtol=1e-4)
    relit = apply_shading_ratio(cupy.asarray(patch), ratio)
    assert np.abs(cupy.asnumpy(relit).astype(int) - apply_shading_ratio_cpu(patch, expected_ratio)).max() <= 1


def float_shading_ratio(
    patch: NDArray[np.uint8],
    reference: NDArray[np.uint8],
    weights: NDArray[np.float32],
    grid: tuple[int, int],
) -> NDArray[np.float32]:
    """shading_ratio_cpu as it was written first: float32 copies of both images times the weights in
    NumPy, and the weights' coarse average made again for each image."""

    def low_frequency(image: NDArray[np.float32]) -> NDArray[np.float32]:
        weighted = cv2.resize(image * weights[..., None], grid, interpolation=cv2.INTER_AREA)
        total = cv2.resize(weights, grid, interpolation=cv2.INTER_AREA)
        weighted = cv2.GaussianBlur(weighted, (0, 0), 1.0, borderType=cv2.BORDER_REPLICATE)
        total = cv2.GaussianBlur(total, (0, 0), 1.0, borderType=cv2.BORDER_REPLICATE)
        return np.asarray(weighted / np.maximum(total, 1e-4)[..., None], np.float32)

    low_patch = low_frequency(patch.astype(np.float32))
    low_reference = low_frequency(reference.astype(np.float32))
    return np.clip((low_reference + 6.0) / (low_patch + 6.0), 0.3, 3.0).astype(np.float32)


@pytest.mark.parametrize("size", [(232, 285), (97, 131)])
def test_ratio_and_apply_equal_the_float_copies_bit_for_bit(size: tuple[int, int]) -> None:
    """A face-box-sized patch, the reference a strided view of a larger frame, a soft oval weight with
    empty corners and a hole: the same float32 ratio and the same relit pixels."""
    width, height = size
    rng = np.random.default_rng(width)
    lit = render(detail(11), light(1.0, (1.0, 0.8, 0.7)))
    patch = np.asarray(cv2.resize(lit, size, interpolation=cv2.INTER_LINEAR), np.uint8)
    patch[height // 3 : height // 3 + 10] = 2  # a dark band: a ratio far from 1
    frame = rng.integers(0, 256, (height + 40, width + 60, 3), dtype=np.uint8)
    frame[20 : 20 + height, 30 : 30 + width] = cv2.GaussianBlur(patch[:, ::-1], (0, 0), 4.0)
    reference = frame[20 : 20 + height, 30 : 30 + width]
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    oval = ((xs - width / 2) / (0.45 * width)) ** 2 + ((ys - height / 2) / (0.48 * height)) ** 2
    weights = np.clip((1.0 - oval) * 4.0, 0.0, 1.0).astype(np.float32)
    weights[height // 2 : height // 2 + 12, width // 3 : width // 2] = 0.0
    grid = shading_grid(size, max(4.0, width / 4.0))
    ratio = shading_ratio_cpu(patch, reference, weights, grid)
    expected = float_shading_ratio(patch, reference, weights, grid)
    np.testing.assert_array_equal(ratio.view(np.int32), expected.view(np.int32))
    assert ratio.max() > 1.3 and ratio.min() < 0.8  # relit both ways
    stretched = (ratio * np.float32(1.7)).astype(np.float32)  # relit values past 255 are clipped
    for grid_ratio in (ratio, stretched):
        ratio_full = cv2.resize(grid_ratio, size, interpolation=cv2.INTER_LINEAR)
        relit = np.clip(patch.astype(np.float32) * ratio_full + 0.5, 0, 255).astype(np.uint8)
        np.testing.assert_array_equal(apply_shading_ratio_cpu(patch, grid_ratio), relit)
