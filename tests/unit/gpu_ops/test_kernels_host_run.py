"""The CUDA kernels of gpu_ops, compiled as plain C++ with a tiny shim and run on the CPU.

No GPU is needed: each thread of the launch grid is one loop iteration. This checks the kernels'
indexing, pitches and integer maths against the NumPy/OpenCV mirrors bit for bit on every CI run;
the `gpu`-marked parity tests then only have to confirm the device toolchain. Skipped without g++.
"""

import ctypes

import numpy as np
import pytest

from gpu_ops.affine_crop import crop_faces_cpu, opencv_inverse_matrices, warp_crop_cpu
from gpu_ops.colorspace import (
    i420_to_rgb_cpu,
    rgb_to_i420_cpu,
    rgb_to_yuv_coefficients,
    yuv_to_rgb_coefficients,
)
from gpu_ops.paste_back import classic_sampling_matrix, paste_back_cpu
from tests.unit.gpu_ops.host_kernels import build_host_kernels, grid, pointer
from tests.unit.gpu_ops.test_affine_crop import random_similarity
from tests.unit.gpu_ops.test_colorspace import padded_planes
from tests.unit.gpu_ops.test_paste_back import CASES, face_matrix, feathered_mask

SHIM = r"""
#include <cmath>
struct dim3_ { int x, y, z; };
static dim3_ blockIdx, blockDim, threadIdx;
#define __global__
#define __device__
#define __forceinline__ inline
static inline int __double2int_rn(double v) { return (int)std::nearbyint(v); }
#include "colorspace.cu"
#include "affine_crop.cu"
#include "paste_back.cu"
#define LAUNCH(GX, GY, GZ, CALL) blockDim = {32, 8, 1}; \
  for (int z = 0; z < GZ; ++z) for (int j = 0; j < GY; ++j) for (int i = 0; i < GX; ++i) \
  for (int ty = 0; ty < 8; ++ty) for (int tx = 0; tx < 32; ++tx) { blockIdx = {i, j, z}; threadIdx = {tx, ty, 0}; CALL; }
extern "C" {
void run_yuv420_to_rgb(int gx, int gy, const uchar* y, int yp, const uchar* u, int up, const uchar* v, int vp,
    int step, uchar* rgb, int rp, int w, int h, int a, int b, int c, int d, int e, int f) {
  LAUNCH(gx, gy, 1, yuv420_to_rgb(y, yp, u, up, v, vp, step, rgb, rp, w, h, a, b, c, d, e, f)); }
void run_rgb_to_yuv420(int gx, int gy, const uchar* rgb, int rp, uchar* y, int yp, uchar* u, int up, uchar* v,
    int vp, int hw, int hh, int c0, int c1, int c2, int c3, int c4, int c5, int c6, int c7, int c8, int c9) {
  LAUNCH(gx, gy, 1, rgb_to_yuv420(rgb, rp, y, yp, u, up, v, vp, hw, hh, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9)); }
void run_warp_crop(int gx, int gy, const uchar* f, int p, int w, int h, const double* m, uchar* o, int ow, int oh) {
  LAUNCH(gx, gy, 1, warp_crop(f, p, w, h, m, o, ow, oh)); }
void run_crop_faces(int gx, int gy, int gz, const long long* table, int fc, const int* index, const double* m,
    float* out, int ow, int oh, int n, float scale, float m0, float m1, float m2, float s0, float s1, float s2,
    int swap, int nchw) {
  LAUNCH(gx, gy, gz, crop_faces(table, fc, index, m, out, ow, oh, n, scale, m0, m1, m2, s0, s1, s2, swap, nchw)); }
void run_paste_back(int gx, int gy, uchar* f, int fp, const uchar* c, const float* mask, int cw, int ch,
    const double* m, int bx, int by, int bw, int bh) {
  LAUNCH(gx, gy, 1, paste_back(f, fp, c, mask, cw, ch, m, bx, by, bw, bh)); }
}
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return build_host_kernels(
        tmp_path_factory.mktemp("kernels"), ("colorspace", "affine_crop", "paste_back"), SHIM
    )


@pytest.mark.parametrize(("colorspace", "full_range"), [("bt601", False), ("bt709", False), ("bt709", True)])
def test_colorspace_kernels_equal_cpu_mirror(kernels: ctypes.CDLL, colorspace: str, full_range: bool) -> None:
    rng = np.random.default_rng(0)
    height, width = 96, 160
    y, u, v = padded_planes(rng, height, width)
    c = yuv_to_rgb_coefficients(colorspace, full_range)  # type: ignore[arg-type]
    coefficients = (c.luma, c.v_to_red, c.v_to_green, c.u_to_green, c.u_to_blue, c.luma_offset)
    expected = i420_to_rgb_cpu(y, u, v, colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    uv = np.stack([u, v], axis=-1)
    for step, u_plane, v_plane in ((1, u, v), (2, uv[..., 0], uv[..., 1])):  # I420, then NV12
        rgb = np.zeros((height, width, 3), np.uint8)
        kernels.run_yuv420_to_rgb(
            *grid(width, height), pointer(y), y.strides[0], pointer(u_plane), u_plane.strides[0],
            pointer(v_plane), v_plane.strides[0], step, pointer(rgb), rgb.strides[0], width, height, *coefficients,
        )  # fmt: skip
        np.testing.assert_array_equal(rgb, expected)
    source = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    k = rgb_to_yuv_coefficients(colorspace, full_range)  # type: ignore[arg-type]
    planes = (
        np.zeros((height, width), np.uint8),
        *(np.zeros((height // 2, width // 2), np.uint8) for _ in "uv"),
    )
    kernels.run_rgb_to_yuv420(
        *grid(width // 2, height // 2), pointer(source), source.strides[0], pointer(planes[0]), width,
        pointer(planes[1]), width // 2, pointer(planes[2]), width // 2, width // 2, height // 2,
        k.red_to_luma, k.green_to_luma, k.blue_to_luma, k.red_to_u, k.green_to_u, k.blue_to_u,
        k.red_to_v, k.green_to_v, k.blue_to_v, k.luma_offset,
    )  # fmt: skip
    cpu_planes = rgb_to_i420_cpu(source, colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    for kernel_plane, cpu_plane in zip(planes, cpu_planes, strict=True):
        np.testing.assert_array_equal(kernel_plane, cpu_plane)


def test_crop_kernels_equal_opencv(kernels: ctypes.CDLL) -> None:
    rng = np.random.default_rng(1)
    wide = rng.integers(0, 256, (240, 340, 3), dtype=np.uint8)
    frames = [wide[:, :320], rng.integers(0, 256, (180, 200, 3), dtype=np.uint8)]  # first one pitched
    packed = [np.ascontiguousarray(frame) for frame in frames]
    matrix = random_similarity(rng, (320, 240))
    crop = np.zeros((112, 128, 3), np.uint8)
    kernels.run_warp_crop(*grid(128, 112), pointer(frames[0]), frames[0].strides[0], 320, 240, pointer(opencv_inverse_matrices(matrix)), pointer(crop), 128, 112)  # fmt: skip
    np.testing.assert_array_equal(crop, warp_crop_cpu(packed[0], matrix, (128, 112)))
    frame_index = np.array([0, 1, 1, 0], np.int32)
    matrices = np.stack([random_similarity(rng, (200, 180)) for _ in frame_index])
    table = np.array([[f.ctypes.data, f.strides[0], f.shape[1], f.shape[0]] for f in frames], np.int64)
    inverse = opencv_inverse_matrices(matrices)
    for layout in ("nchw", "nhwc"):
        expected = crop_faces_cpu(packed, frame_index, matrices, (64, 48), scale=1 / 255, mean=(0.5, 0.4, 0.3), std=(0.5, 0.25, 0.2), swap_rb=True, layout=layout)  # type: ignore[arg-type]  # fmt: skip
        out = np.zeros(expected.shape, np.float32)
        floats = [ctypes.c_float(value) for value in (1 / 255, 0.5, 0.4, 0.3, 0.5, 0.25, 0.2)]
        kernels.run_crop_faces(
            *grid(64, 48), len(frame_index), pointer(table), len(frames), pointer(frame_index), pointer(inverse),
            pointer(out), 64, 48, len(frame_index), *floats, 1, int(layout == "nchw"),
        )  # fmt: skip
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(("frame_size", "crop_size", "centre", "face_scale", "angle"), CASES)
def test_paste_back_kernel_equals_cpu_mirror(
    kernels: ctypes.CDLL,
    frame_size: tuple[int, int],
    crop_size: int,
    centre: tuple[float, float],
    face_scale: float,
    angle: float,
) -> None:
    rng = np.random.default_rng(crop_size)
    frame = rng.integers(0, 256, (frame_size[1], frame_size[0], 3), dtype=np.uint8)
    crop = rng.integers(0, 256, (crop_size, crop_size, 3), dtype=np.uint8)
    mask = feathered_mask(crop_size)
    matrix = face_matrix(centre, face_scale, angle, crop_size)
    expected = frame.copy()
    x1, y1, x2, y2 = paste_back_cpu(expected, crop, matrix, mask)
    result = frame.copy()
    sampling = classic_sampling_matrix(matrix)
    kernels.run_paste_back(
        *grid(x2 - x1, y2 - y1), pointer(result), result.strides[0], pointer(crop), pointer(mask),
        crop_size, crop_size, pointer(sampling), x1, y1, x2 - x1, y2 - y1,
    )  # fmt: skip
    # Float mask sampling and blending may round differently from OpenCV's (vectorised) float remap.
    difference = np.abs(result.astype(int) - expected)
    assert difference.max() <= 1
    assert np.count_nonzero(difference) <= 1e-4 * difference.size
