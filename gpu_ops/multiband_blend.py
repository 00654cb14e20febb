"""Multi-band (Laplacian pyramid) blend: paste a face so its edge does not show.

A single feathered alpha blend has one transition width for every frequency: narrow, and a tone
difference between source and target shows as a line along the edge; wide, and the source's fine
detail smears into a ghost. Burt and Adelson's answer is one transition per frequency band: the
difference D = patch - region is split into a Laplacian pyramid, each band is weighted by its own
mask, and the weighted bands are added to the region.

Here the masks come from the caller at full resolution, one per band, finest first (`masks[..., k]`):
the engine warps them from the source texture, where they were built once, each fading in further
inside the face than the one before. So near the face's edge (and near the eye and mouth holes) only
the fine detail of the source is added while the tone (the coarse bands) stays the target's; deep
inside, all bands together give the patch exactly. Because each band is weighted at full resolution
(not on its pyramid level, where a mask would spread with the level's footprint), a band is
attenuated exactly where its mask says and nowhere else: a pixel whose masks are all 0 keeps its
value bit for bit (what lies outside the face, the target's eyes and inner mouth), and the source's
coarse tone is not dimmed around the holes of a mask (a beard next to the mouth stays a beard).

Band k at full resolution is P_k - P_(k+1), with P_k the pyramid's level k expanded back up (cv2.pyrUp
k times; P_0 = D), so the blend is  D_blended = A_0 * D + sum over k >= 1 of (A_k - A_(k-1)) * P_k.
The pyramid of D is built as a normalised convolution with the finest mask as weight: D * w and w are
reduced together (cv2.pyrDown) and divided per level, so the coarse bands never see what lies outside
the face (the source's hair or background in the texture crop, the target's eyes). OpenCV's exact
border rules are ported to the CUDA kernels (gpu_ops/kernels/multiband_blend.cu).

In place: `region` (uint8 H x W x 3, may be a view of a frame) receives the blend of `patch` (uint8,
same shape) with `masks` (2..MAX_LEVELS float32 H x W planes in [0, 1], finest first). Levels that would
be smaller than MIN_LEVEL_PX are dropped (a tiny face gets fewer bands). The CuPy path agrees within
1 level.
"""

import logging
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import get_kernel, is_device_array, require_cupy
from gpu_ops.errors import InvalidFrameError
from gpu_ops.masks import blend, blend_cpu

logger = logging.getLogger(__name__)

Image = NDArray[np.uint8]
MAX_LEVELS = 5
MIN_LEVEL_PX = 2  # the coarsest level keeps at least this many pixels across
WEIGHT_EPSILON = 1e-3  # below this summed weight a coarse pixel has no trusted difference
_BLOCK_2D = (32, 8, 1)


def usable_levels(levels: int, width: int, height: int) -> int:
    """How many of `levels` fit a (w, h) box with every level at least MIN_LEVEL_PX across."""
    usable, side = 1, min(width, height)
    while usable < levels and (side + 1) // 2 >= MIN_LEVEL_PX:
        side = (side + 1) // 2
        usable += 1
    return usable


def level_sizes(width: int, height: int, levels: int) -> list[tuple[int, int]]:
    """(w, h) of every pyramid level, finest first, as cv2.pyrDown makes them."""
    sizes = [(width, height)]
    for _ in range(levels - 1):
        sizes.append(((sizes[-1][0] + 1) // 2, (sizes[-1][1] + 1) // 2))
    return sizes


def _check(region: Any, patch: Any, masks: Sequence[Any]) -> None:
    if region.ndim != 3 or region.shape[2] != 3 or region.shape != patch.shape:
        raise InvalidFrameError(
            f"multi-band blend needs two equal H x W x 3 images, got {region.shape}, {patch.shape}"
        )
    shapes = {tuple(mask.shape) for mask in masks}
    if not 2 <= len(masks) <= MAX_LEVELS or shapes != {tuple(region.shape[:2])}:
        raise InvalidFrameError(
            f"masks must be 2..{MAX_LEVELS} H x W planes over the region {region.shape[:2]}, got {sorted(shapes)}"
        )


def _normalised(level: NDArray[np.float32]) -> NDArray[np.float32]:
    """The weighted difference divided by its weight (at least WEIGHT_EPSILON): D where the face is
    trusted, fading to 0 where nothing is."""
    *weighted, weight = cv2.split(level)
    weight = np.maximum(weight, np.float32(WEIGHT_EPSILON))
    return np.asarray(cv2.merge([cv2.divide(plane, weight) for plane in weighted]), np.float32)


def multiband_blend_cpu(region: Image, patch: Image, masks: Sequence[NDArray[np.float32]]) -> None:
    """Blend `patch` into `region` in place, band by band (see module docstring). OpenCV calls on
    contiguous planes throughout: a strided NumPy pass over a face box costs as much as the whole blend."""
    _check(region, patch, masks)
    height, width = region.shape[:2]
    levels = usable_levels(len(masks), width, height)
    planes = [np.ascontiguousarray(mask, np.float32) for mask in masks[:levels]]
    if levels == 1:
        blend_cpu(region, patch, planes[0])
        return
    weight = planes[0]
    # full-resolution steps write into arrays they already have (dst=, out=) and each band is expanded
    # only when it is added: fewer face-box-sized float arrays in flight, fewer cache misses (measured:
    # a quarter of the blend's time)
    weighted = np.asarray(cv2.subtract(patch, region, dtype=cv2.CV_32F), np.float32)
    cv2.multiply(weighted, cv2.merge([weight] * 3), dst=weighted)
    pyramid = [np.asarray(cv2.merge([weighted, weight]), np.float32)]
    for _ in range(levels - 1):
        pyramid.append(np.asarray(cv2.pyrDown(pyramid[-1]), np.float32))
    # at level k: [N_k, up(N_k+1), up(up(N_k+2)), ...], each group of 3 expanded one level at a time
    carried: list[NDArray[Any]] = [_normalised(pyramid[-1])]
    for index in range(levels - 2, 0, -1):
        size = (pyramid[index].shape[1], pyramid[index].shape[0])
        carried = [_normalised(pyramid[index])] + [cv2.pyrUp(group, dstsize=size) for group in carried]
    correction = weighted  # m_0 * D, the finest band's share
    step = np.empty_like(weight)
    for band in range(1, levels):
        expanded = cv2.pyrUp(carried[band - 1], dstsize=(width, height))  # P_band
        cv2.subtract(planes[band], planes[band - 1], dst=step)
        cv2.multiply(expanded, cv2.merge([step] * 3), dst=expanded)
        cv2.add(correction, expanded, dst=correction)
    blended = np.asarray(cv2.add(correction, region, dtype=cv2.CV_32F), np.float32)
    blended += np.float32(0.5)
    np.clip(blended, 0, 255, out=blended)
    np.copyto(region, blended, casting="unsafe")  # truncates, as astype(np.uint8)


def multiband_blend_gpu(region: Any, patch: Any, masks: Sequence[Any]) -> None:
    """`multiband_blend_cpu` on the device: CuPy region (a view is fine), patch and mask planes; in place."""
    cupy = require_cupy()
    _check(region, patch, masks)
    height, width = int(region.shape[0]), int(region.shape[1])
    levels = usable_levels(len(masks), width, height)
    if levels == 1:
        blend(region, patch, cupy.ascontiguousarray(cupy.asarray(masks[0], cupy.float32)))
        return
    stacked = cupy.stack([cupy.asarray(mask, cupy.float32) for mask in masks[:levels]], axis=2)
    if region.strides[2] != 1 or region.strides[1] != 3:
        raise InvalidFrameError("the region must hold packed RGB pixels (any row pitch)")
    patch = cupy.ascontiguousarray(patch)
    sizes = level_sizes(width, height, levels)
    pyramid = [cupy.empty((h, w, 4), cupy.float32) for w, h in sizes]
    get_kernel("multiband_blend", "blend_base")(
        _grid(width, height), _BLOCK_2D,
        (patch, np.int32(patch.strides[0]), region, np.int32(region.strides[0]), stacked,
         np.int32(levels), np.int32(width), np.int32(height), pyramid[0]),
    )  # fmt: skip
    down = get_kernel("multiband_blend", "pyramid_down")
    for index in range(1, levels):
        (w, h), (source_w, source_h) = sizes[index], sizes[index - 1]
        down(
            _grid(w, h), _BLOCK_2D,
            (pyramid[index - 1], np.int32(source_w), np.int32(source_h), pyramid[index], np.int32(w), np.int32(h)),
        )  # fmt: skip
    stack = get_kernel("multiband_blend", "blend_stack")
    top_w, top_h = sizes[-1]
    carried = cupy.empty((top_h, top_w, 3), cupy.float32)
    stack(
        _grid(top_w, top_h), _BLOCK_2D,
        (carried, np.int32(0), np.int32(1), np.int32(1), pyramid[-1], np.int32(top_w), np.int32(top_h), carried),
    )  # fmt: skip
    for index in range(levels - 2, 0, -1):
        (w, h), (coarse_w, coarse_h) = sizes[index], sizes[index + 1]
        coarse_channels = int(carried.shape[2])
        finer = cupy.empty((h, w, 3 + coarse_channels), cupy.float32)
        stack(
            _grid(w, h), _BLOCK_2D,
            (carried, np.int32(coarse_channels), np.int32(coarse_w), np.int32(coarse_h), pyramid[index],
             np.int32(w), np.int32(h), finer),
        )  # fmt: skip
        carried = finer
    coarse_w, coarse_h = sizes[1]
    get_kernel("multiband_blend", "blend_finish")(
        _grid(width, height), _BLOCK_2D,
        (carried, np.int32(coarse_w), np.int32(coarse_h), np.int32(levels), pyramid[0], stacked,
         np.int32(levels), region, np.int32(region.strides[0]), np.int32(width), np.int32(height)),
    )  # fmt: skip


def mask_planes(masks: Any, scale: Any) -> list[Any]:
    """The channels of a uint8 H x W x C mask image (as warped from a texture) as float32 planes in
    [0, 1], each times the float32 H x W `scale`: the blend's per-level masks, on the masks' device."""
    if is_device_array(masks):
        cupy = require_cupy()
        factor = cupy.asarray(scale, cupy.float32) * np.float32(1.0 / 255.0)
        return [masks[..., channel].astype(cupy.float32) * factor for channel in range(int(masks.shape[2]))]
    factor = np.ascontiguousarray(scale, np.float32) * np.float32(1.0 / 255.0)
    channels = cv2.split(np.ascontiguousarray(masks))
    return [np.asarray(cv2.multiply(channel, factor, dtype=cv2.CV_32F), np.float32) for channel in channels]


def multiband_blend(region: Any, patch: Any, masks: Sequence[Any]) -> None:
    """Dispatcher: `multiband_blend_gpu` for a CuPy region, else `multiband_blend_cpu`."""
    if is_device_array(region):
        multiband_blend_gpu(region, patch, masks)
        return
    multiband_blend_cpu(region, patch, masks)


def _grid(width: int, height: int) -> tuple[int, int, int]:
    return (width + _BLOCK_2D[0] - 1) // _BLOCK_2D[0], (height + _BLOCK_2D[1] - 1) // _BLOCK_2D[1], 1
