"""The mesh engine's CUDA kernels, compiled as plain C++ with a tiny shim and run on the CPU.

As tests/unit/gpu_ops/test_kernels_host_run.py: each thread of the launch grid is one loop iteration,
atomics are plain read-modify-writes (threads run one after another). This checks the triangle
rasteriser against cv2.fillConvexPoly pixel for pixel, the remap against cv2.remap bit for bit, and
the other kernels against their CPU mirrors on every CI run. Skipped without g++.
"""

import ctypes

import cv2
import numpy as np
import pytest

from gpu_ops.color_transfer import (
    _RATIO_OFFSET,
    SHADING_RATIO_LIMITS,
    match_shading_cpu,
    shading_gaussian,
    shading_grid,
)
from gpu_ops.masks import fill_polygons_cpu
from gpu_ops.mesh_warp import (
    OUTSIDE,
    build_remap_cpu,
    fixed_point_triangles,
    rasterize_triangle_ids_cpu,
    triangle_affines,
    triangle_draw_order,
)
from tests.unit.gpu_ops.host_kernels import build_host_kernels, grid, pointer
from tests.unit.gpu_ops.test_mesh_warp import grid_mesh

MESH_SOURCES = ("mesh_warp", "color_transfer", "masks")
SHIM = r"""
#include <cmath>
struct dim3_ { int x, y, z; };
static dim3_ blockIdx, blockDim, threadIdx;
#define __global__
#define __device__
#define __forceinline__ inline
static inline int atomicMax(int* address, int value) { int old = *address; if (value > old) *address = value; return old; }
static inline int __float2int_rn(float v) { return (int)std::nearbyint(v); }
#include "mesh_warp.cu"
#include "color_transfer.cu"
#include "masks.cu"
#define LAUNCH(GX, GY, BX, BY, CALL) blockDim = {BX, BY, 1}; \
  for (int j = 0; j < GY; ++j) for (int i = 0; i < GX; ++i) \
  for (int ty = 0; ty < BY; ++ty) for (int tx = 0; tx < BX; ++tx) { blockIdx = {i, j, 0}; threadIdx = {tx, ty, 0}; CALL; }
extern "C" {
void run_rasterize(int gx, const int* points, const int* order, int count, int* ranks, int w, int h) {
  LAUNCH(gx, 1, 128, 1, rasterize_triangles(points, order, count, ranks, w, h)); }
void run_remap_field(int gx, int gy, const int* ranks, const int* order, const float* affines, float* mx, float* my,
    int w, int h) {
  LAUNCH(gx, gy, 32, 8, remap_field(ranks, order, affines, mx, my, w, h)); }
void run_remap_bilinear(int gx, int gy, const unsigned char* t, int tp, int tw, int th, int c, const float* mx,
    const float* my, unsigned char* out, int w, int h) {
  LAUNCH(gx, gy, 32, 8, remap_bilinear(t, tp, tw, th, c, mx, my, out, w, h)); }
void run_shading(const unsigned char* p, int pp, const unsigned char* r, int rp, const float* wt, int wp, int w, int h,
    int gw, int gh, double ax, double ay, double lx, double ly, const float* gauss, float lo, float hi, float off,
    float* cells, float* ratio, unsigned char* out) {
  LAUNCH((gw + 15) / 16, (gh + 15) / 16, 16, 16, shading_cells(p, pp, r, rp, wt, wp, w, h, gw, gh, ax, ay, cells));
  LAUNCH((gw + 15) / 16, (gh + 15) / 16, 16, 16, shading_ratio(cells, gw, gh, gauss, 9, lo, hi, off, ratio));
  LAUNCH((w + 31) / 32, (h + 7) / 8, 32, 8, apply_shading(p, pp, ratio, gw, gh, lx, ly, out, w, h)); }
void run_fill_polygon(const int* points, int count, unsigned char* mask, int pitch, int w, int h) {
  LAUNCH((h + 63) / 64, 1, 64, 1, polygon_rows(points, count, mask, pitch, w, h));
  LAUNCH((count + 63) / 64, 1, 64, 1, polygon_outline(points, count, mask, pitch, w, h)); }
}
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return build_host_kernels(tmp_path_factory.mktemp("mesh_kernels"), MESH_SOURCES, SHIM)


def kernel_triangle_ids(kernels: ctypes.CDLL, dst_triangles: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Triangle id per pixel from the kernel's draw ranks (OUTSIDE where no triangle drew)."""
    width, height = size
    order = triangle_draw_order(dst_triangles)
    corners = np.ascontiguousarray(fixed_point_triangles(dst_triangles))
    ranks = np.full((height, width), OUTSIDE, np.int32)
    kernels.run_rasterize((len(order) + 127) // 128, pointer(corners), pointer(order), len(order), pointer(ranks), width, height)  # fmt: skip
    return np.where(ranks >= 0, order[np.maximum(ranks, 0)], OUTSIDE)


def kernel_remap(kernels: ctypes.CDLL, dst: np.ndarray, src: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    width, height = size
    order = triangle_draw_order(dst)
    corners = np.ascontiguousarray(fixed_point_triangles(dst))
    affines = np.ascontiguousarray(triangle_affines(dst, src).reshape(-1, 6))
    ranks = np.full((height, width), OUTSIDE, np.int32)
    kernels.run_rasterize((len(order) + 127) // 128, pointer(corners), pointer(order), len(order), pointer(ranks), width, height)  # fmt: skip
    map_x = np.zeros((height, width), np.float32)
    map_y = np.zeros((height, width), np.float32)
    kernels.run_remap_field(*grid(width, height), pointer(ranks), pointer(order), pointer(affines), pointer(map_x), pointer(map_y), width, height)  # fmt: skip
    return map_x, map_y


def random_triangles(rng: np.random.Generator, count: int, size: tuple[int, int]) -> np.ndarray:
    """Triangles of every kind: large and thin, both windings, some reaching outside the image, one degenerate."""
    width, height = size
    centres = rng.uniform([-10, -10], [width + 10, height + 10], (count, 1, 2))
    triangles = (centres + rng.normal(0, 12, (count, 3, 2))).astype(np.float32)
    triangles[0] = [[3, 3], [9, 9], [15, 15]]  # collinear: never drawn
    triangles[1] = [[0.5, 0.5], [30.25, 2.0], [4.0, 27.75]]
    triangles[2] = triangles[1, ::-1]  # the same triangle folded
    return triangles


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rasterizer_gives_every_pixel_the_cpu_triangle(kernels: ctypes.CDLL, seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = (97, 83)
    triangles = random_triangles(rng, 160, size)
    expected = rasterize_triangle_ids_cpu(triangles, size)
    assert len(np.unique(expected)) > 60  # overlapping triangles: the drawing order decides many pixels
    np.testing.assert_array_equal(kernel_triangle_ids(kernels, triangles, size), expected)


def test_rasterizer_matches_on_a_mesh_with_shared_edges(kernels: ctypes.CDLL) -> None:
    points, triangles = grid_mesh(12, 14, 11.0, (3.3, 2.9), jitter=4.5, seed=4)
    dst = points[triangles]
    size = (130, 150)
    np.testing.assert_array_equal(
        kernel_triangle_ids(kernels, dst, size), rasterize_triangle_ids_cpu(dst, size)
    )


def test_remap_field_equals_the_cpu_field_bit_for_bit(kernels: ctypes.CDLL) -> None:
    points, triangles = grid_mesh(10, 10, 12.0, (5.4, 6.1), jitter=4.0, seed=9)
    rng = np.random.default_rng(3)
    src_points = (points * 0.8 + rng.normal(0, 1.5, points.shape) + 7.0).astype(np.float32)
    dst, src = points[triangles], src_points[triangles]
    size = (121, 126)
    expected_x, expected_y = build_remap_cpu(dst, src, size)
    map_x, map_y = kernel_remap(kernels, dst, src, size)
    assert (expected_x == -1).any() and (expected_x != -1).sum() > 8000
    np.testing.assert_array_equal(map_x, expected_x)
    np.testing.assert_array_equal(map_y, expected_y)


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_remap_kernel_equals_cv2_remap_bit_for_bit(kernels: ctypes.CDLL, channels: int) -> None:
    rng = np.random.default_rng(channels)
    wide = rng.integers(0, 256, (90, 110, channels), dtype=np.uint8)
    texture = wide[:, :100]  # pitched rows: 110 pixels apart
    height, width = 70, 80
    map_x = rng.uniform(-3.0, 103.0, (height, width)).astype(np.float32)
    map_y = rng.uniform(-3.0, 93.0, (height, width)).astype(np.float32)
    map_x[:4] = np.round(map_x[:4] * 32) / 32 + 1 / 64  # exact half steps: the rounding rule shows
    map_x[4, :] = -1.0  # "outside the mesh"
    packed = np.ascontiguousarray(texture if channels > 1 else texture[..., 0])
    expected = cv2.remap(
        packed, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=0
    )
    out = np.zeros((height, width, channels), np.uint8)
    kernels.run_remap_bilinear(*grid(width, height), pointer(texture), texture.strides[0], 100, 90, channels, pointer(map_x), pointer(map_y), pointer(out), width, height)  # fmt: skip
    np.testing.assert_array_equal(out.reshape(expected.shape), expected)
    assert (out[4] == 0).all()


def lit_face(rng: np.random.Generator, size: tuple[int, int], light: tuple[float, float]) -> np.ndarray:
    """A textured, side-lit RGB image: a smooth gradient times a skin tone plus pixel noise."""
    width, height = size
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    shade = 0.5 + light[0] * xs / width + light[1] * ys / height
    tone = np.array([200, 150, 120], np.float32)
    image = shade[..., None] * tone + rng.normal(0, 12, (height, width, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


@pytest.mark.parametrize(("size", "cell_px"), [((123, 141), 16.0), ((96, 96), 12.0), ((200, 170), 13.7)])
def test_shading_kernels_within_one_level_of_the_cpu(
    kernels: ctypes.CDLL, size: tuple[int, int], cell_px: float
) -> None:
    rng = np.random.default_rng(size[0])
    width, height = size
    patch = lit_face(rng, size, (0.6, 0.1))
    frame = np.zeros((height + 20, width + 30, 3), np.uint8)
    frame[10 : 10 + height, 15 : 15 + width] = lit_face(rng, size, (-0.3, 0.4))
    reference = frame[10 : 10 + height, 15 : 15 + width]  # a strided box of a frame, as in the engine
    ellipse = np.zeros((height, width), np.float32)
    cv2.ellipse(ellipse, (width // 2, height // 2), (width // 3, height // 2 - 4), 0, 0, 360, 1.0, -1)
    weights = np.ascontiguousarray(cv2.GaussianBlur(ellipse, (0, 0), 4.0), np.float32)
    expected = match_shading_cpu(patch, np.ascontiguousarray(reference), weights, cell_px=cell_px)
    grid_width, grid_height = shading_grid(size, cell_px)
    cells = np.zeros((grid_height, grid_width, 7), np.float32)
    ratio = np.zeros((grid_height, grid_width, 3), np.float32)
    out = np.zeros_like(patch)
    gaussian = shading_gaussian()
    doubles = [ctypes.c_double(v) for v in (1 / (grid_width / width), 1 / (grid_height / height), 1 / (width / grid_width), 1 / (height / grid_height))]  # fmt: skip
    floats = [ctypes.c_float(v) for v in (*SHADING_RATIO_LIMITS, _RATIO_OFFSET)]
    kernels.run_shading(
        pointer(patch), patch.strides[0], pointer(reference), reference.strides[0], pointer(weights),
        weights.strides[0], width, height, grid_width, grid_height, *doubles, pointer(gaussian), *floats,
        pointer(cells), pointer(ratio), pointer(out),
    )  # fmt: skip
    difference = np.abs(out.astype(int) - expected)
    assert np.abs(expected.astype(int) - patch).mean() > 5  # the relighting changes the patch
    assert difference.max() <= 1
    assert np.count_nonzero(difference) <= 1e-3 * difference.size


def random_polygon(rng: np.random.Generator, size: tuple[int, int], star: bool) -> np.ndarray:
    """A star-shaped (lip-like) or a random, self-intersecting polygon with every vertex inside the image."""
    width, height = size
    count = int(rng.integers(3, 22))
    if star:
        angles = np.sort(rng.uniform(0, 2 * np.pi, count))
        radii = rng.uniform(3, 18, count)
        centre = rng.uniform(20, [width - 20, height - 20])
        points = np.stack([centre[0] + radii * np.cos(angles), centre[1] + radii * np.sin(angles)], axis=1)
    else:
        points = rng.uniform(0, [width - 1, height - 1], (count, 2))
    return points.astype(np.float32)


@pytest.mark.parametrize("star", [True, False])
def test_polygon_kernels_fill_the_pixels_cv2_fills(kernels: ctypes.CDLL, star: bool) -> None:
    rng = np.random.default_rng(int(star))
    size = (64, 52)
    for _ in range(300):
        polygon = random_polygon(rng, size, star)
        expected = fill_polygons_cpu(size, [polygon])
        fixed = np.ascontiguousarray(np.round(polygon.astype(np.float64) * 16).astype(np.int32))
        wide = np.zeros((size[1], size[0] + 9), np.uint8)
        mask = wide[:, : size[0]]  # pitched rows
        kernels.run_fill_polygon(pointer(fixed), len(fixed), pointer(mask), wide.strides[0], *size)
        np.testing.assert_array_equal(mask, expected)
        assert not wide[:, size[0] :].any()
