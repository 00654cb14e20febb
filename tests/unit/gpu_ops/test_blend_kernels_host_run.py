"""The multi-band blend's CUDA kernels, compiled as plain C++ with a tiny shim and run on the CPU.

As tests/unit/gpu_ops/test_mesh_kernels_host_run.py: each thread of the launch grid is one loop
iteration. Checked: the pyramid reduction against cv2.pyrDown and the expansion against cv2.pyrUp (odd and
even sizes, OpenCV's own border rules, 3 to 9 channels), and the whole launch sequence of
`multiband_blend_gpu` against the NumPy mirror, on every CI run. Skipped without g++.
"""

import ctypes

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.multiband_blend import level_sizes, multiband_blend_cpu, usable_levels
from tests.unit.gpu_ops.host_kernels import build_host_kernels, grid, pointer
from tests.unit.gpu_ops.test_multiband_blend import MASK_WIDTHS, disc, level_masks, textured

SHIM = r"""
#include <cmath>
struct dim3_ { int x, y, z; };
static dim3_ blockIdx, blockDim, threadIdx;
#define __global__
#define __device__
#define __forceinline__ inline
#include "multiband_blend.cu"
#define LAUNCH(GX, GY, CALL) blockDim = {32, 8, 1}; \
  for (int j = 0; j < GY; ++j) for (int i = 0; i < GX; ++i) \
  for (int ty = 0; ty < 8; ++ty) for (int tx = 0; tx < 32; ++tx) { blockIdx = {i, j, 0}; threadIdx = {tx, ty, 0}; CALL; }
extern "C" {
void run_base(int gx, int gy, const uchar* p, int pp, const uchar* r, int rp, const float* m, int mc, int w, int h,
    float* base) {
  LAUNCH(gx, gy, blend_base(p, pp, r, rp, m, mc, w, h, base)); }
void run_down(int gx, int gy, const float* s, int sw, int sh, float* out, int w, int h) {
  LAUNCH(gx, gy, pyramid_down(s, sw, sh, out, w, h)); }
void run_stack(int gx, int gy, const float* coarse, int cc, int cw, int ch, const float* level, int w, int h,
    float* out) {
  LAUNCH(gx, gy, blend_stack(coarse, cc, cw, ch, level, w, h, out)); }
void run_finish(int gx, int gy, const float* coarse, int cw, int ch, int levels, const float* base, const float* m,
    int mc, uchar* r, int rp, int w, int h) {
  LAUNCH(gx, gy, blend_finish(coarse, cw, ch, levels, base, m, mc, r, rp, w, h)); }
}
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return build_host_kernels(tmp_path_factory.mktemp("blend_kernels"), ("multiband_blend",), SHIM)


@pytest.mark.parametrize(("width", "height"), [(37, 29), (40, 30), (9, 2), (1, 5)])
def test_pyramid_down_is_cv2_pyr_down(kernels: ctypes.CDLL, width: int, height: int) -> None:
    rng = np.random.default_rng(width)
    source = rng.normal(0, 50, (height, width, 4)).astype(np.float32)
    expected = cv2.pyrDown(source).reshape((height + 1) // 2, (width + 1) // 2, 4)
    out = np.zeros_like(expected)
    w, h = out.shape[1], out.shape[0]
    kernels.run_down(*grid(w, h), pointer(source), width, height, pointer(out), w, h)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(("width", "height", "channels"), [(37, 29, 3), (40, 30, 6), (3, 2, 9), (2, 3, 3)])
def test_stack_expands_as_cv2_pyr_up(kernels: ctypes.CDLL, width: int, height: int, channels: int) -> None:
    """blend_stack puts the level's normalised difference first and cv2.pyrUp of the coarser stack after."""
    rng = np.random.default_rng(height * channels)
    coarse_w, coarse_h = (width + 1) // 2, (height + 1) // 2
    coarse = rng.normal(0, 50, (coarse_h, coarse_w, channels)).astype(np.float32)
    level = rng.normal(0, 50, (height, width, 4)).astype(np.float32)
    level[..., 3] = rng.uniform(0.0, 1.0, (height, width))
    level[0, 0, 3] = 0.0  # no weight: divided by the smallest weight instead
    out = np.zeros((height, width, 3 + channels), np.float32)
    kernels.run_stack(*grid(width, height), pointer(coarse), channels, coarse_w, coarse_h, pointer(level), width, height, pointer(out))  # fmt: skip
    expected = cv2.pyrUp(coarse, dstsize=(width, height)).reshape(height, width, channels)
    np.testing.assert_allclose(out[..., 3:], expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out[..., :3], level[..., :3] / np.maximum(level[..., 3:4], 1e-3), rtol=1e-6)


def kernel_blend(kernels: ctypes.CDLL, region: NDArray[np.uint8], patch: NDArray[np.uint8], planes: list[NDArray[np.float32]]) -> None:  # fmt: skip
    """The launch sequence of multiband_blend_gpu, on host buffers; `region` is written in place."""
    height, width = region.shape[:2]
    levels = usable_levels(len(planes), width, height)
    masks = np.ascontiguousarray(np.stack(planes[:levels], axis=2), np.float32)
    sizes = level_sizes(width, height, levels)
    pyramid = [np.zeros((h, w, 4), np.float32) for w, h in sizes]
    kernels.run_base(*grid(width, height), pointer(patch), patch.strides[0], pointer(region), region.strides[0], pointer(masks), masks.shape[2], width, height, pointer(pyramid[0]))  # fmt: skip
    for index in range(1, levels):
        (w, h), (source_w, source_h) = sizes[index], sizes[index - 1]
        kernels.run_down(*grid(w, h), pointer(pyramid[index - 1]), source_w, source_h, pointer(pyramid[index]), w, h)  # fmt: skip
    top_w, top_h = sizes[-1]
    carried = np.zeros((top_h, top_w, 3), np.float32)
    kernels.run_stack(*grid(top_w, top_h), pointer(carried), 0, 1, 1, pointer(pyramid[-1]), top_w, top_h, pointer(carried))  # fmt: skip
    for index in range(levels - 2, 0, -1):
        (w, h), (coarse_w, coarse_h) = sizes[index], sizes[index + 1]
        finer = np.zeros((h, w, 3 + carried.shape[2]), np.float32)
        kernels.run_stack(*grid(w, h), pointer(carried), carried.shape[2], coarse_w, coarse_h, pointer(pyramid[index]), w, h, pointer(finer))  # fmt: skip
        carried = finer
    coarse_w, coarse_h = sizes[1]
    kernels.run_finish(*grid(width, height), pointer(carried), coarse_w, coarse_h, levels, pointer(pyramid[0]), pointer(masks), masks.shape[2], pointer(region), region.strides[0], width, height)  # fmt: skip


@pytest.mark.parametrize("levels", [2, 3, 4, 5])
def test_blend_kernels_within_one_level_of_the_cpu(kernels: ctypes.CDLL, levels: int) -> None:
    face = disc()
    cv2.circle(face, (75, 60), 12, 0, -1)  # a hole, as the eyes and mouth are
    masks = level_masks(face, (*MASK_WIDTHS, 40.0))[:levels]
    region, patch = textured(20 + levels, (210, 170, 150)), textured(30 + levels, (140, 100, 80))
    expected = region.copy()
    multiband_blend_cpu(expected, patch, masks)
    frame = np.zeros((region.shape[0] + 4, region.shape[1] + 9, 3), np.uint8)
    view = frame[2 : 2 + region.shape[0], 5 : 5 + region.shape[1]]  # pitched rows, as a box of a frame
    view[...] = region
    kernel_blend(kernels, view, patch, masks)
    difference = np.abs(view.astype(int) - expected)
    assert np.abs(expected.astype(int) - region).mean() > 10  # the blend changes the region
    assert difference.max() <= 1 and np.count_nonzero(difference) <= 1e-3 * difference.size
    assert not frame[:2].any() and not frame[:, :5].any() and not frame[:, 5 + region.shape[1] :].any()
