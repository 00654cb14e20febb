"""Soft masks for pasting a face: filled outlines, inward/outward feathers, and the blend.

Masks are built ONCE in a fixed space (the source texture crop of the mesh engine) and then travel with
the texture through the same warp, so no frame-space blur runs per frame (DESIGN.md section 5).
Feathers use a distance transform, so their width is exact in pixels and may vary over the image
(wider at the forehead, where a hard edge against the hairline shows most). Values are float32 in
[0, 1]; outlines are (x, y) pixel polygons, pixel centres on integers.
"""

import logging
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import get_kernel, is_device_array, require_cupy, to_host
from gpu_ops.errors import InvalidFrameError

logger = logging.getLogger(__name__)

Mask = NDArray[np.float32]  # H x W in [0, 1]
BinaryMask = NDArray[np.uint8]  # H x W, 0 or 255
_SUBPIXEL_BITS = 4


def fill_polygons_cpu(size: tuple[int, int], polygons: Sequence[NDArray[np.floating]]) -> BinaryMask:
    """A (w, h) mask with every polygon filled (255; the union where they overlap), vertices at 1/16 px."""
    width, height = size
    mask = np.zeros((height, width), np.uint8)
    scaled = [_fixed_point(polygon) for polygon in polygons]
    for polygon in scaled:  # one call per polygon: a single fillPoly call would XOR the overlaps
        cv2.fillPoly(mask, [polygon], 255, cv2.LINE_8, shift=_SUBPIXEL_BITS)
    return mask


def fill_polygons_gpu(size: tuple[int, int], polygons: Sequence[NDArray[np.floating]]) -> Any:
    """`fill_polygons_cpu` as a CuPy mask, the same pixels (gpu_ops/kernels/masks.cu).

    The kernels reproduce cv2.fillPoly exactly for polygons inside the image; OpenCV's clipping of
    outline segments that leave the image is not reproduced, so a polygon with a vertex outside is
    filled on the host and its (small, uint8) mask uploaded instead.
    """
    cupy = require_cupy()
    width, height = size
    scaled = [_fixed_point(polygon) for polygon in polygons]
    if not all(_inside(polygon, width, height) for polygon in scaled):
        return cupy.asarray(fill_polygons_cpu(size, polygons))
    mask = cupy.zeros((height, width), cupy.uint8)
    rows = get_kernel("masks", "polygon_rows")
    outline = get_kernel("masks", "polygon_outline")
    for polygon in scaled:
        if len(polygon) == 0:
            continue
        points = cupy.asarray(np.ascontiguousarray(polygon.reshape(-1, 2)))
        count = np.int32(len(points))
        shape = (mask, np.int32(width), np.int32(width), np.int32(height))
        rows(((height + 63) // 64,), (64,), (points, count, *shape))
        outline(((len(points) + 63) // 64,), (64,), (points, count, *shape))
    return mask


def fill_polygons(
    size: tuple[int, int], polygons: Sequence[NDArray[np.floating]], *, on_device: bool = False
) -> Any:
    """Dispatcher: a CuPy mask when `on_device` (see `fill_polygons_gpu`), else `fill_polygons_cpu`."""
    if on_device:
        return fill_polygons_gpu(size, polygons)
    return fill_polygons_cpu(size, polygons)


def _fixed_point(polygon: NDArray[np.floating]) -> NDArray[np.int32]:
    return np.round(np.asarray(polygon, np.float64) * (1 << _SUBPIXEL_BITS)).astype(np.int32).reshape(-1, 2)


def _inside(fixed_polygon: NDArray[np.int32], width: int, height: int) -> bool:
    """Every vertex (as OpenCV rounds it) lies on a pixel of the image: no outline clipping happens."""
    rounded = (fixed_polygon + (1 << (_SUBPIXEL_BITS - 1))) >> _SUBPIXEL_BITS
    return bool(((rounded >= 0) & (rounded < np.array([width, height]))).all())


def smoothstep(values: NDArray[np.float32]) -> NDArray[np.float32]:
    """0 below 0, 1 above 1, and a C1 ramp between (no visible step where a feather starts or ends)."""
    clipped = np.clip(values, 0.0, 1.0)
    return (clipped * clipped * (3.0 - 2.0 * clipped)).astype(np.float32)


def feather_inside_cpu(region: BinaryMask, width_px: float | NDArray[np.float32]) -> Mask:
    """0 on and outside the region's edge, rising to 1 at `width_px` inside (a scalar or a per-pixel map)."""
    _check_binary(region)
    distance = cv2.distanceTransform(region, cv2.DIST_L2, cv2.DIST_MASK_PRECISE)
    width = np.maximum(np.asarray(width_px, np.float32), 1e-3)
    return smoothstep((distance / width).astype(np.float32))


def feather_outside_cpu(
    region: BinaryMask, margin_px: float, width_px: float, *, precise: bool = True
) -> Mask:
    """1 inside the region and within `margin_px` of it, falling to 0 at `margin_px + width_px` outside.
    `precise` False: OpenCV's 5 x 5 chamfer distance (within 2 %, a fifth of the time: per-frame masks)."""
    _check_binary(region)
    outside = np.where(region > 0, 0, 255).astype(np.uint8)
    distance = cv2.distanceTransform(
        outside, cv2.DIST_L2, cv2.DIST_MASK_PRECISE if precise else cv2.DIST_MASK_5
    )
    return (1.0 - smoothstep((distance - margin_px) / max(width_px, 1e-3))).astype(np.float32)


def blend_cpu(region: NDArray[np.uint8], patch: NDArray[np.uint8], alpha: Mask) -> None:
    """region = region * (1 - alpha) + patch * alpha, rounded, written in place (region may be a view)."""
    if region.shape != patch.shape or alpha.shape != region.shape[:2]:
        raise InvalidFrameError(f"blend shapes differ: {region.shape}, {patch.shape}, {alpha.shape}")
    base = region.astype(np.float32)
    base += (patch.astype(np.float32) - base) * alpha[..., None]
    np.copyto(region, np.clip(base + 0.5, 0, 255).astype(np.uint8))


def blend(region: Any, patch: Any, alpha: Any) -> None:
    """Dispatcher of `blend_cpu`; CuPy arrays use the same formula with CuPy maths."""
    if is_device_array(region):
        cupy = require_cupy()
        base = region.astype(cupy.float32)
        base += (patch.astype(cupy.float32) - base) * alpha[..., None]
        region[...] = cupy.clip(base + 0.5, 0, 255).astype(cupy.uint8)
        return
    blend_cpu(region, patch, alpha)


def feather_inside(region: Any, width_px: float | NDArray[np.float32]) -> Mask:
    """Dispatcher: masks are built once per source, on the host; device input is copied back."""
    return feather_inside_cpu(to_host(region), width_px)


def feather_outside(region: Any, margin_px: float, width_px: float) -> Mask:
    """Dispatcher: see `feather_inside`."""
    return feather_outside_cpu(to_host(region), margin_px, width_px)


def _check_binary(region: NDArray[Any]) -> None:
    if region.ndim != 2 or region.dtype != np.uint8:
        raise InvalidFrameError(f"mask must be H x W uint8, got {region.shape} {region.dtype}")
