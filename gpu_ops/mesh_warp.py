"""Piecewise-affine (mesh) warp as ONE remap: a per-pixel source map built from the triangle each pixel is in.

Drawing triangles one by one (warpAffine + mask per triangle) leaves 1-pixel cracks along shared edges
and costs one warp per triangle. Here the output region is rasterised once into a triangle-id image
(inclusive edges, 1/16-px vertices, so neighbouring triangles overlap by at most a pixel and nothing
is left between them); each pixel then takes the affine map of its triangle. A piecewise-affine map is
continuous across shared edges, so a pixel given to either neighbour gets (almost) the same source
point: no cracks by construction. One `cv2.remap` then samples every channel (colour and masks).

Conventions: points are (x, y) pixels with pixel centres on integers (cv2.warpAffine/remap). Triangles
whose target area is below `MIN_TRIANGLE_AREA` are skipped (their pixels belong to neighbours).
Folded (negative-area) triangles are drawn first so the front-facing surface wins where they overlap.
"""

import logging
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import is_device_array, require_cupy
from gpu_ops.errors import InvalidFrameError

logger = logging.getLogger(__name__)

MIN_TRIANGLE_AREA = 1e-3  # px^2 (twice the area, signed-area units)
_SUBPIXEL_BITS = 4
OUTSIDE = -1  # triangle id of pixels no triangle covers

TrianglePoints = NDArray[np.float32]  # [T,3,2] (x, y) per triangle corner
RemapField = tuple[NDArray[np.float32], NDArray[np.float32]]  # map_x, map_y [h,w]


def triangle_affines(dst_triangles: TrianglePoints, src_triangles: TrianglePoints) -> NDArray[np.float32]:
    """Per-triangle [T,2,3] affine maps dst -> src; degenerate dst triangles get an all-zero matrix."""
    dst = dst_triangles.astype(np.float64)
    src = src_triangles.astype(np.float64)
    dst_edges = np.stack([dst[:, 1] - dst[:, 0], dst[:, 2] - dst[:, 0]], axis=2)  # [T,2,2] columns
    src_edges = np.stack([src[:, 1] - src[:, 0], src[:, 2] - src[:, 0]], axis=2)
    determinant = dst_edges[:, 0, 0] * dst_edges[:, 1, 1] - dst_edges[:, 0, 1] * dst_edges[:, 1, 0]
    usable = np.abs(determinant) > MIN_TRIANGLE_AREA
    safe = np.where(usable, determinant, 1.0)
    inverse = np.empty_like(dst_edges)
    inverse[:, 0, 0] = dst_edges[:, 1, 1] / safe
    inverse[:, 0, 1] = -dst_edges[:, 0, 1] / safe
    inverse[:, 1, 0] = -dst_edges[:, 1, 0] / safe
    inverse[:, 1, 1] = dst_edges[:, 0, 0] / safe
    linear = src_edges @ inverse
    affines = np.zeros((len(dst), 2, 3), np.float64)
    affines[:, :, :2] = linear
    affines[:, :, 2] = src[:, 0] - (linear @ dst[:, 0, :, None])[..., 0]
    affines[~usable] = 0.0
    return affines.astype(np.float32)


def rasterize_triangle_ids_cpu(dst_triangles: TrianglePoints, size: tuple[int, int]) -> NDArray[np.int32]:
    """Id of the triangle covering each pixel of a (w, h) image, OUTSIDE where none does."""
    width, height = size
    ids = np.full((height, width), OUTSIDE, np.int32)
    a, b, c = dst_triangles[:, 0], dst_triangles[:, 1], dst_triangles[:, 2]
    twice_area = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])
    fixed_point = np.round(dst_triangles * (1 << _SUBPIXEL_BITS)).astype(np.int32)
    folded = np.flatnonzero(twice_area < -MIN_TRIANGLE_AREA)
    front = np.flatnonzero(twice_area > MIN_TRIANGLE_AREA)
    polygons = list(fixed_point)
    for index in np.concatenate([folded, front]).tolist():
        cv2.fillConvexPoly(ids, polygons[index], index, cv2.LINE_8, _SUBPIXEL_BITS)
    return ids


def build_remap_cpu(
    dst_triangles: TrianglePoints, src_triangles: TrianglePoints, size: tuple[int, int]
) -> RemapField:
    """The (map_x, map_y) field of a (w, h) output: source coordinates per pixel, -1 outside the mesh."""
    _check_triangles(dst_triangles, src_triangles)
    width, height = size
    ids = rasterize_triangle_ids_cpu(dst_triangles, size)
    affines = triangle_affines(dst_triangles, src_triangles).reshape(-1, 6)
    # one extra row maps uncovered pixels (id OUTSIDE = -1 picks the last row) to (-1, -1)
    table = np.concatenate([affines, np.array([[0, 0, -1, 0, 0, -1]], np.float32)])
    coefficients = table[ids]
    xs = np.arange(width, dtype=np.float32)[None, :]
    ys = np.arange(height, dtype=np.float32)[:, None]
    map_x = coefficients[..., 0] * xs + coefficients[..., 1] * ys + coefficients[..., 2]
    map_y = coefficients[..., 3] * xs + coefficients[..., 4] * ys + coefficients[..., 5]
    return map_x, map_y


def apply_remap_cpu(texture: NDArray[np.uint8], field: RemapField) -> NDArray[np.uint8]:
    """Sample a uint8 (h,w) or (h,w,C<=4) texture at a remap field (bilinear); 0 outside the texture."""
    if texture.dtype != np.uint8 or texture.ndim not in (2, 3):
        raise InvalidFrameError(f"texture must be uint8 HxW or HxWxC, got {texture.dtype} {texture.shape}")
    map_x, map_y = field
    warped = cv2.remap(texture, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return np.asarray(warped, dtype=np.uint8)


def warp_mesh_cpu(
    texture: NDArray[np.uint8],
    src_triangles: TrianglePoints,
    dst_triangles: TrianglePoints,
    size: tuple[int, int],
) -> NDArray[np.uint8]:
    """Warp `texture` so each src triangle lands on its dst triangle, in a (w, h) image.

    Pixels outside every dst triangle are 0 in all channels (so an alpha channel says "not covered").
    """
    return apply_remap_cpu(texture, build_remap_cpu(dst_triangles, src_triangles, size))


def build_remap(
    dst_triangles: TrianglePoints, src_triangles: TrianglePoints, size: tuple[int, int]
) -> RemapField:
    """Dispatcher: the field is built on the host (triangles are host data); see `build_remap_cpu`."""
    return build_remap_cpu(dst_triangles, src_triangles, size)


def apply_remap(texture: Any, field: RemapField) -> Any:
    """Dispatcher: CuPy textures round-trip through the CPU mirror until a kernel exists (logged once)."""
    if is_device_array(texture):
        cupy = require_cupy()
        _log_cpu_fallback_once()
        return cupy.asarray(apply_remap_cpu(cupy.asnumpy(texture), field))
    return apply_remap_cpu(texture, field)


def warp_mesh(
    texture: Any, src_triangles: TrianglePoints, dst_triangles: TrianglePoints, size: tuple[int, int]
) -> Any:
    """Dispatcher of `warp_mesh_cpu` (build the field once, sample the texture once)."""
    return apply_remap(texture, build_remap(dst_triangles, src_triangles, size))


_fallback_logged = False


def _log_cpu_fallback_once() -> None:
    global _fallback_logged
    if not _fallback_logged:
        logger.info("mesh warp: no CuPy kernel yet; CuPy arrays use the CPU mirror")
        _fallback_logged = True


def _check_triangles(dst_triangles: TrianglePoints, src_triangles: TrianglePoints) -> None:
    if dst_triangles.shape != src_triangles.shape or dst_triangles.shape[1:] != (3, 2):
        raise InvalidFrameError(
            f"triangles must be [T,3,2] and alike, got {dst_triangles.shape} and {src_triangles.shape}"
        )
