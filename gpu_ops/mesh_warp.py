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

Device path (CuPy): `build_remap_gpu` rasterises with a port of the same OpenCV fill (one thread per
triangle, the draw rank kept by atomicMax, so every pixel gets the same triangle as here) and fills the
same float32 field; `apply_remap_gpu` reproduces cv2.remap's 1/32-px fixed point bit for bit
(gpu_ops/kernels/mesh_warp.cu; checked on the host by tests/unit/gpu_ops/test_mesh_kernels_host_run.py).
"""

import logging
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import get_kernel, is_device_array, require_cupy
from gpu_ops.errors import InvalidFrameError

logger = logging.getLogger(__name__)

MIN_TRIANGLE_AREA = 1e-3  # px^2 (twice the area, signed-area units)
_SUBPIXEL_BITS = 4
OUTSIDE = -1  # triangle id of pixels no triangle covers
_BLOCK_2D = (32, 8, 1)

TrianglePoints = NDArray[np.float32]  # [T,3,2] (x, y) per triangle corner
RemapField = tuple[NDArray[np.float32], NDArray[np.float32]]  # map_x, map_y [h,w]


def triangle_affines(dst_triangles: TrianglePoints, src_triangles: TrianglePoints) -> NDArray[np.float32]:
    """Per-triangle [T,2,3] affine maps dst -> src; degenerate dst triangles get an all-zero matrix.
    The 2 x 2 algebra is written out per coefficient: NumPy's stacked matmul of [T,2,2] arrays costs
    four times as much for a face's 900 triangles (0.23 -> 0.06 ms)."""
    dst = dst_triangles.astype(np.float64)
    src = src_triangles.astype(np.float64)
    # edges from corner 0, in dst (d1, d2) and src (s1, s2)
    d1x, d1y = dst[:, 1, 0] - dst[:, 0, 0], dst[:, 1, 1] - dst[:, 0, 1]
    d2x, d2y = dst[:, 2, 0] - dst[:, 0, 0], dst[:, 2, 1] - dst[:, 0, 1]
    s1x, s1y = src[:, 1, 0] - src[:, 0, 0], src[:, 1, 1] - src[:, 0, 1]
    s2x, s2y = src[:, 2, 0] - src[:, 0, 0], src[:, 2, 1] - src[:, 0, 1]
    determinant = d1x * d2y - d2x * d1y
    usable = np.abs(determinant) > MIN_TRIANGLE_AREA
    inverse = 1.0 / np.where(usable, determinant, 1.0)
    affines = np.empty((len(dst), 2, 3), np.float64)
    # [s1 s2] @ inverse([d1 d2]), then the offset that takes dst corner 0 to src corner 0
    affines[:, 0, 0] = (s1x * d2y - s2x * d1y) * inverse
    affines[:, 0, 1] = (s2x * d1x - s1x * d2x) * inverse
    affines[:, 1, 0] = (s1y * d2y - s2y * d1y) * inverse
    affines[:, 1, 1] = (s2y * d1x - s1y * d2x) * inverse
    affines[:, 0, 2] = src[:, 0, 0] - (affines[:, 0, 0] * dst[:, 0, 0] + affines[:, 0, 1] * dst[:, 0, 1])
    affines[:, 1, 2] = src[:, 0, 1] - (affines[:, 1, 0] * dst[:, 0, 0] + affines[:, 1, 1] * dst[:, 0, 1])
    affines[~usable] = 0.0
    return affines.astype(np.float32)


def rasterize_triangle_ids_cpu(dst_triangles: TrianglePoints, size: tuple[int, int]) -> NDArray[np.int32]:
    """Id of the triangle covering each pixel of a (w, h) image, OUTSIDE where none does."""
    width, height = size
    ids = np.full((height, width), OUTSIDE, np.int32)
    polygons = list(fixed_point_triangles(dst_triangles))
    for index in triangle_draw_order(dst_triangles).tolist():
        cv2.fillConvexPoly(ids, polygons[index], index, cv2.LINE_8, _SUBPIXEL_BITS)
    return ids


def triangle_draw_order(dst_triangles: TrianglePoints) -> NDArray[np.int32]:
    """Ids of the triangles to draw, in drawing order: folded ones first, then front-facing; tiny ones never."""
    a, b, c = dst_triangles[:, 0], dst_triangles[:, 1], dst_triangles[:, 2]
    twice_area = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])
    folded = np.flatnonzero(twice_area < -MIN_TRIANGLE_AREA)
    front = np.flatnonzero(twice_area > MIN_TRIANGLE_AREA)
    return np.concatenate([folded, front]).astype(np.int32)


def fixed_point_triangles(dst_triangles: TrianglePoints) -> NDArray[np.int32]:
    """Triangle corners in 1/16 px, [T,3,2] int32, as both rasterisers draw them."""
    return np.round(dst_triangles * (1 << _SUBPIXEL_BITS)).astype(np.int32)


def build_remap_cpu(
    dst_triangles: TrianglePoints,
    src_triangles: TrianglePoints,
    size: tuple[int, int],
    *,
    outside: tuple[float, float] = (-1.0, -1.0),
) -> RemapField:
    """The (map_x, map_y) field of a (w, h) output: source coordinates per pixel, `outside` where no
    triangle covers it. The default point lies off every texture (cv2.remap's border gives 0 there);
    a caller whose textures are 0 in every channel at one texel (the mesh engine's `BLANK_TEXEL`) gets
    the same pixels twice as fast by pointing there: cv2.remap samples a pixel whose point is off the
    texture on a slow per-pixel border path (a 287 x 234 face box with a fifth of its pixels uncovered:
    0.33 -> 0.16 ms for a 4-channel texture)."""
    _check_triangles(dst_triangles, src_triangles)
    width, height = size
    # pixel indices as intp once (np.take would convert int32 ones on each of its six calls)
    ids = rasterize_triangle_ids_cpu(dst_triangles, size).reshape(-1).astype(np.intp)
    affines = triangle_affines(dst_triangles, src_triangles).reshape(-1, 6)
    # one extra row maps uncovered pixels (id OUTSIDE = -1 picks the last row) to `outside`; one
    # contiguous row per coefficient, gathered one at a time (no [h,w,6] gather, no strided planes)
    blank = np.array([[0, 0, outside[0], 0, 0, outside[1]]], np.float32)
    table = np.concatenate([affines, blank]).T.copy()
    xs = np.arange(width, dtype=np.float32)[None, :]
    ys = np.arange(height, dtype=np.float32)[:, None]

    def coordinate(first: int) -> NDArray[np.float32]:
        """(c0 * x + c1 * y) + c2 with coefficients `first`.. of each pixel's triangle, in float32."""
        value = table[first].take(ids).reshape(height, width)
        value *= xs
        term = table[first + 1].take(ids).reshape(height, width)
        term *= ys
        value += term
        value += table[first + 2].take(ids).reshape(height, width)
        return value

    return coordinate(0), coordinate(3)


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


def build_remap_gpu(
    dst_triangles: TrianglePoints, src_triangles: TrianglePoints, size: tuple[int, int]
) -> Any:
    """`build_remap_cpu` on the device: CuPy (map_x, map_y), the same triangle per pixel, the same floats.

    Only the small per-triangle tables (draw order, 1/16-px corners, affines) are made on the host.
    """
    _check_triangles(dst_triangles, src_triangles)
    cupy = require_cupy()
    width, height = size
    order = cupy.asarray(triangle_draw_order(dst_triangles))
    corners = cupy.asarray(np.ascontiguousarray(fixed_point_triangles(dst_triangles)))
    affines = cupy.asarray(
        np.ascontiguousarray(triangle_affines(dst_triangles, src_triangles).reshape(-1, 6))
    )
    ranks = cupy.full((height, width), OUTSIDE, cupy.int32)
    map_x = cupy.empty((height, width), cupy.float32)
    map_y = cupy.empty((height, width), cupy.float32)
    count = int(order.size)
    if count:
        rasterize = get_kernel("mesh_warp", "rasterize_triangles")
        rasterize(((count + 127) // 128,), (128,), (corners, order, np.int32(count), ranks, np.int32(width), np.int32(height)))  # fmt: skip
    fill = get_kernel("mesh_warp", "remap_field")
    fill(
        _grid(width, height),
        _BLOCK_2D,
        (ranks, order, affines, map_x, map_y, np.int32(width), np.int32(height)),
    )
    return map_x, map_y


def apply_remap_gpu(texture: Any, field: Any) -> Any:
    """`apply_remap_cpu` on the device (cv2.remap's 1/32-px fixed point, bit for bit); CuPy in and out."""
    cupy = require_cupy()
    texture = cupy.asarray(texture)
    if (
        texture.dtype != cupy.uint8
        or texture.ndim not in (2, 3)
        or (texture.ndim == 3 and texture.shape[2] > 4)
    ):
        raise InvalidFrameError(f"texture must be uint8 HxW or HxWxC, got {texture.dtype} {texture.shape}")
    channels = 1 if texture.ndim == 2 else int(texture.shape[2])
    if texture.strides[-1] != 1 or (texture.ndim == 3 and texture.strides[1] != channels):
        texture = cupy.ascontiguousarray(texture)
    map_x = cupy.ascontiguousarray(cupy.asarray(field[0], cupy.float32))
    map_y = cupy.ascontiguousarray(cupy.asarray(field[1], cupy.float32))
    height, width = map_x.shape
    out = cupy.empty((height, width) if texture.ndim == 2 else (height, width, channels), cupy.uint8)
    kernel = get_kernel("mesh_warp", "remap_bilinear")
    kernel(
        _grid(width, height), _BLOCK_2D,
        (texture, np.int32(texture.strides[0]), np.int32(texture.shape[1]), np.int32(texture.shape[0]),
         np.int32(channels), map_x, map_y, out, np.int32(width), np.int32(height)),
    )  # fmt: skip
    return out


def build_remap(
    dst_triangles: TrianglePoints,
    src_triangles: TrianglePoints,
    size: tuple[int, int],
    *,
    on_device: bool = False,
    outside: tuple[float, float] = (-1.0, -1.0),
) -> Any:
    """Dispatcher: the field on the device (CuPy maps, -1 where uncovered: the device remap has no slow
    border path) when `on_device`, else `build_remap_cpu` with `outside`."""
    if on_device:
        return build_remap_gpu(dst_triangles, src_triangles, size)
    return build_remap_cpu(dst_triangles, src_triangles, size, outside=outside)


def apply_remap(texture: Any, field: Any) -> Any:
    """Dispatcher: the device kernel when the texture or the field is CuPy (the other is uploaded)."""
    if is_device_array(texture) or is_device_array(field[0]):
        return apply_remap_gpu(texture, field)
    return apply_remap_cpu(texture, field)


def color_channels(warped: Any) -> Any:
    """The colour of a warped uint8 H x W x 4 (RGB + alpha) texture: a packed H x W x 3 copy, on its
    device. On the CPU cv2.cvtColor copies it (NumPy's strided copy of a face box costs 30 times more)."""
    if is_device_array(warped):
        return require_cupy().ascontiguousarray(warped[..., :3])
    if warped.dtype != np.uint8 or warped.ndim != 3 or warped.shape[2] != 4:
        raise InvalidFrameError(f"a warped texture must be uint8 HxWx4, got {warped.dtype} {warped.shape}")
    return np.asarray(cv2.cvtColor(warped, cv2.COLOR_RGBA2RGB), np.uint8)


def warp_mesh(
    texture: Any, src_triangles: TrianglePoints, dst_triangles: TrianglePoints, size: tuple[int, int]
) -> Any:
    """Dispatcher of `warp_mesh_cpu` (build the field once, sample the texture once; on the texture's device)."""
    field = build_remap(dst_triangles, src_triangles, size, on_device=is_device_array(texture))
    return apply_remap(texture, field)


def _grid(width: int, height: int) -> tuple[int, int, int]:
    return (width + _BLOCK_2D[0] - 1) // _BLOCK_2D[0], (height + _BLOCK_2D[1] - 1) // _BLOCK_2D[1], 1


def _check_triangles(dst_triangles: TrianglePoints, src_triangles: TrianglePoints) -> None:
    if dst_triangles.shape != src_triangles.shape or dst_triangles.shape[1:] != (3, 2):
        raise InvalidFrameError(
            f"triangles must be [T,3,2] and alike, got {dst_triangles.shape} and {src_triangles.shape}"
        )
