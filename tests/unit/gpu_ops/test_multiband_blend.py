"""Multi-band blend: exact inside and outside, a soft tone transition, detail kept, nothing leaks in."""

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.backend import cupy_available
from gpu_ops.errors import InvalidFrameError
from gpu_ops.masks import blend_cpu, feather_inside_cpu
from gpu_ops.multiband_blend import mask_planes, multiband_blend, multiband_blend_cpu, usable_levels

CUPY_OK, CUPY_REASON = cupy_available()
SIZE = (150, 130)  # w, h: odd sizes appear on the coarser levels


def textured(seed: int, tone: tuple[float, float, float]) -> NDArray[np.uint8]:
    rng = np.random.default_rng(seed)
    detail = cv2.GaussianBlur(rng.normal(0.0, 18.0, (SIZE[1], SIZE[0])).astype(np.float32), (0, 0), 0.8)
    return np.clip(np.array(tone, np.float32) + detail[..., None], 0, 255).astype(np.uint8)


def disc() -> NDArray[np.uint8]:
    region = np.zeros((SIZE[1], SIZE[0]), np.uint8)
    cv2.ellipse(region, (SIZE[0] // 2, SIZE[1] // 2), (68, 60), 0, 0, 360, 255, -1)
    return region


def level_masks(region: NDArray[np.uint8], widths: tuple[float, ...]) -> list[NDArray[np.float32]]:
    """One mask plane per level, each fading in over a wider band inside the region (finest first)."""
    return [feather_inside_cpu(region, width) for width in widths]


MASK_WIDTHS = (3.0, 6.0, 12.0, 24.0)


def test_deep_inside_is_the_patch_and_outside_is_untouched() -> None:
    region, patch = textured(1, (200, 160, 140)), textured(2, (170, 120, 100))
    masks = level_masks(disc(), MASK_WIDTHS)
    blended = region.copy()
    multiband_blend_cpu(blended, patch, masks)
    outside = masks[0] == 0
    np.testing.assert_array_equal(blended[outside], region[outside])
    deep = cv2.erode(disc(), np.ones((61, 61), np.uint8)) > 0  # every level's mask is 1 around these
    assert deep.sum() > 500
    assert np.abs(blended[deep].astype(int) - patch[deep]).max() <= 1


def test_a_tone_step_becomes_a_soft_ramp_while_the_detail_stays() -> None:
    """The feather's edge: a 30-level tone difference. A one-band blend over the finest mask puts the
    whole step within 3 px; the multi-band blend spreads the tone over the widest band and keeps the
    patch's fine detail right up to the edge."""
    flat_region = np.full((SIZE[1], SIZE[0], 3), 200, np.uint8)
    flat_patch = np.full((SIZE[1], SIZE[0], 3), 170, np.uint8)
    masks = level_masks(disc(), MASK_WIDTHS)
    one_band, many_bands = flat_region.copy(), flat_region.copy()
    blend_cpu(one_band, flat_patch, masks[0])
    multiband_blend_cpu(many_bands, flat_patch, masks)

    def steepest(image: NDArray[np.uint8]) -> float:
        value = image[..., 0].astype(np.float32)
        return float(
            np.hypot(cv2.Sobel(value, cv2.CV_32F, 1, 0), cv2.Sobel(value, cv2.CV_32F, 0, 1)).max() / 8
        )

    assert steepest(one_band) > 6.0  # levels per pixel across the finest feather
    assert steepest(many_bands) < 0.4 * steepest(one_band)

    region, patch = textured(3, (200, 160, 140)), textured(4, (200, 160, 140))
    blended = region.copy()
    multiband_blend_cpu(blended, patch, masks)
    ring = (masks[0] > 0.99) & (masks[3] < 0.5)  # near the edge: fine bands on, coarse off

    def high(image: NDArray[np.uint8]) -> NDArray[np.float32]:
        return image.astype(np.float32) - cv2.GaussianBlur(image.astype(np.float32), (0, 0), 2.0)

    correlation = np.corrcoef(high(blended)[ring].ravel(), high(patch)[ring].ravel())[0, 1]
    assert ring.sum() > 1000 and correlation > 0.9


def test_what_lies_outside_the_trusted_face_never_reaches_the_result() -> None:
    """The patch outside the finest mask (the source's hair, its background) is ignored by every band."""
    region = textured(5, (200, 160, 140))
    patch = textured(6, (180, 140, 120))
    masks = level_masks(disc(), MASK_WIDTHS)
    with_hair = patch.copy()
    with_hair[masks[0] == 0] = (40, 25, 10)
    first, second = region.copy(), region.copy()
    multiband_blend_cpu(first, patch, masks)
    multiband_blend_cpu(second, with_hair, masks)
    np.testing.assert_array_equal(first, second)


def test_holes_keep_the_region_exactly() -> None:
    """An eye or mouth hole (mask 0 inside the face) keeps the region's pixels bit for bit."""
    face = disc()
    hole = np.zeros_like(face)
    cv2.circle(hole, (75, 60), 12, 255, -1)
    region, patch = textured(7, (200, 160, 140)), textured(8, (150, 110, 90))
    masks = level_masks(np.where(hole > 0, 0, face).astype(np.uint8), MASK_WIDTHS)
    blended = region.copy()
    multiband_blend_cpu(blended, patch, masks)
    np.testing.assert_array_equal(blended[hole > 0], region[hole > 0])
    assert np.abs(blended[(masks[0] > 0.5)].astype(int) - region[(masks[0] > 0.5)]).mean() > 10


def test_next_to_a_hole_the_patch_keeps_its_tone() -> None:
    """Masks act at full resolution: a band is weakened only where its own mask is, so a dark patch (a
    beard) a few pixels from a hole (the mouth) keeps its tone although the coarse levels span the hole."""
    face = disc()
    hole = np.zeros_like(face)
    cv2.ellipse(hole, (75, 75), (22, 8), 0, 0, 360, 255, -1)
    cut = np.where(hole > 0, 0, face).astype(np.uint8)
    near_hole = (cv2.distanceTransform(255 - hole, cv2.DIST_L2, 3) > 6) & (
        cv2.distanceTransform(255 - hole, cv2.DIST_L2, 3) < 10
    )
    masks = [feather_inside_cpu(cut, 3.0)] + [
        feather_inside_cpu(face, w) * feather_inside_cpu(cut, 4.0) for w in MASK_WIDTHS[1:]
    ]
    region = np.full((SIZE[1], SIZE[0], 3), 200, np.uint8)
    patch = np.full((SIZE[1], SIZE[0], 3), 90, np.uint8)
    multiband_blend_cpu(region, patch, masks)
    assert near_hole.sum() > 300
    assert np.abs(region[near_hole].astype(int) - 90).max() <= 1
    np.testing.assert_array_equal(region[hole > 0], 200)


def test_small_boxes_use_fewer_levels_and_one_level_is_the_plain_blend() -> None:
    assert usable_levels(4, 150, 130) == 4
    assert usable_levels(4, 5, 40) == 3  # 5 -> 3 -> 2
    assert usable_levels(4, 3, 3) == 2 and usable_levels(4, 2, 9) == 1
    region = np.full((2, 9, 3), 100, np.uint8)
    patch = np.full((2, 9, 3), 200, np.uint8)
    masks = [np.full((2, 9), 0.5, np.float32)] * 4
    expected = region.copy()
    blend_cpu(expected, patch, masks[0])
    multiband_blend_cpu(region, patch, masks)
    np.testing.assert_array_equal(region, expected)


def test_a_view_of_a_frame_is_written_in_place_and_shapes_are_checked() -> None:
    frame = np.zeros((SIZE[1] + 10, SIZE[0] + 20, 3), np.uint8)
    frame[5 : 5 + SIZE[1], 10 : 10 + SIZE[0]] = textured(9, (200, 160, 140))
    copy = frame.copy()
    masks = level_masks(disc(), MASK_WIDTHS)
    patch = textured(10, (120, 90, 70))
    multiband_blend(frame[5 : 5 + SIZE[1], 10 : 10 + SIZE[0]], patch, masks)
    expected = np.ascontiguousarray(copy[5 : 5 + SIZE[1], 10 : 10 + SIZE[0]])
    multiband_blend_cpu(expected, patch, masks)
    np.testing.assert_array_equal(frame[5 : 5 + SIZE[1], 10 : 10 + SIZE[0]], expected)
    assert not frame[:5].any() and not frame[:, :10].any()
    with pytest.raises(InvalidFrameError):
        multiband_blend_cpu(expected, patch[:-1], masks)
    with pytest.raises(InvalidFrameError):
        multiband_blend_cpu(expected, patch, masks[:1])
    with pytest.raises(InvalidFrameError):
        multiband_blend_cpu(expected, patch, [masks[0], masks[1][:-1]])


def test_mask_planes_are_the_channels_over_255_times_the_scale() -> None:
    rng = np.random.default_rng(14)
    warped = rng.integers(0, 256, (30, 20, 3), dtype=np.uint8)
    scale = rng.uniform(0, 1, (30, 20)).astype(np.float32)
    planes = mask_planes(warped, scale)
    assert len(planes) == 3 and all(
        plane.dtype == np.float32 and plane.flags.c_contiguous for plane in planes
    )
    for channel, plane in enumerate(planes):
        np.testing.assert_allclose(plane, warped[..., channel] / 255.0 * scale, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)
def test_multiband_blend_parity() -> None:
    """The CuPy kernels on a strided view of a device frame: within 1 level of the CPU mirror."""
    import cupy

    rng = np.random.default_rng(11)
    face = disc()
    cv2.circle(face, (75, 60), 12, 0, -1)
    masks = [mask * np.float32(rng.uniform(0.8, 1.0)) for mask in level_masks(face, MASK_WIDTHS)]
    region = textured(12, (210, 170, 150))
    patch = textured(13, (140, 100, 80))
    expected = region.copy()
    multiband_blend_cpu(expected, patch, masks)
    frame = cupy.zeros((SIZE[1] + 6, SIZE[0] + 8, 3), cupy.uint8)
    frame[3 : 3 + SIZE[1], 4 : 4 + SIZE[0]] = cupy.asarray(region)
    multiband_blend(
        frame[3 : 3 + SIZE[1], 4 : 4 + SIZE[0]], cupy.asarray(patch), [cupy.asarray(mask) for mask in masks]
    )
    result = cupy.asnumpy(frame[3 : 3 + SIZE[1], 4 : 4 + SIZE[0]])
    difference = np.abs(result.astype(int) - expected)
    assert difference.max() <= 1 and np.count_nonzero(difference) <= 1e-3 * difference.size
    assert not cupy.asnumpy(frame[:3]).any()


def allocating_blend(
    region: NDArray[np.uint8], patch: NDArray[np.uint8], masks: list[NDArray[np.float32]]
) -> None:
    """multiband_blend_cpu as first written (every step a new array), for the bit-for-bit check."""
    height, width = region.shape[:2]
    levels = usable_levels(len(masks), width, height)
    planes = [np.ascontiguousarray(mask, np.float32) for mask in masks[:levels]]
    weight = planes[0]
    weighted = cv2.multiply(cv2.subtract(patch, region, dtype=cv2.CV_32F), cv2.merge([weight] * 3))
    pyramid = [np.asarray(cv2.merge([weighted, weight]), np.float32)]
    for _ in range(levels - 1):
        pyramid.append(np.asarray(cv2.pyrDown(pyramid[-1]), np.float32))

    def normalised(level: NDArray[np.float32]) -> NDArray[np.float32]:
        *parts, total = cv2.split(level)
        total = np.maximum(total, np.float32(1e-3))
        return np.asarray(cv2.merge([cv2.divide(part, total) for part in parts]), np.float32)

    carried = [normalised(pyramid[-1])]
    for index in range(levels - 2, 0, -1):
        size = (pyramid[index].shape[1], pyramid[index].shape[0])
        carried = [normalised(pyramid[index])] + [
            np.asarray(cv2.pyrUp(group, dstsize=size), np.float32) for group in carried
        ]
    expanded = [cv2.pyrUp(group, dstsize=(width, height)) for group in carried]
    correction = weighted
    for band in range(1, levels):
        step = cv2.subtract(planes[band], planes[band - 1])
        correction = cv2.add(correction, cv2.multiply(expanded[band - 1], cv2.merge([step] * 3)))
    blended = cv2.add(correction, region, dtype=cv2.CV_32F)
    np.copyto(region, np.clip(blended + np.float32(0.5), 0, 255).astype(np.uint8))


@pytest.mark.parametrize("levels", [2, 4, 5])
def test_blend_equals_the_allocating_version_bit_for_bit(levels: int) -> None:
    """A face box of a frame (a strided view), a darker, textured patch, soft level masks with holes
    (eyes, mouth) scaled by a keep weight as the engine makes them: the same bytes as before."""
    frame = np.random.default_rng(9).integers(0, 256, (SIZE[1] + 20, SIZE[0] + 31, 3), dtype=np.uint8)
    frame[10 : 10 + SIZE[1], 15 : 15 + SIZE[0]] = textured(3, (205, 150, 120))
    patch = textured(4, (120, 90, 80))
    face = disc()
    cv2.circle(face, (50, 50), 9, 0, -1)
    cv2.ellipse(face, (75, 95), (20, 7), 0, 0, 360, 0, -1)
    keep = np.ones(face.shape, np.float32)
    keep[85:105, 55:95] = 0.4
    masks = [mask * keep for mask in level_masks(face, (2.0, 5.0, 9.0, 17.0, 30.0)[:levels])]
    region = frame[10 : 10 + SIZE[1], 15 : 15 + SIZE[0]]
    expected = region.copy()
    allocating_blend(expected, patch, masks)
    multiband_blend_cpu(region, patch, masks)
    np.testing.assert_array_equal(region, expected)
    assert np.abs(expected.astype(int) - textured(3, (205, 150, 120))).max() > 50
