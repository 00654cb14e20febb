"""Make a warped source face take the target's light and tone before it is blended in.

Two methods, both weighted by the paste mask so background, eyes and mouth do not count:
- `match_shading`: the target's low-frequency shading replaces the source's. Both images are reduced
  to a coarse grid (cells of ~1/10 face), a mask-normalised blur fills the grid, and the patch is
  multiplied per channel by the upsampled ratio target/source. Side light, shadows and skin tone
  follow the target; pores, stubble and features (what identity is made of) stay the source's.
- `transfer_lab_statistics`: one global mean/std match in CIE Lab (the classic "Reinhard" transfer).
  It fixes the average tone only: the source's own lighting stays, so a face lit from the left pasted
  on a face lit from the right looks like a mask. Kept as the baseline and for flat-lit inputs.
Inputs are uint8 H x W x 3 RGB of the same size and a float32 H x W weight map; output uint8.
`match_shading` = `shading_ratio` (the coarse ratio grid: the colour statistics of this frame) then
`apply_shading_ratio`; the engine smooths the grid over time in between. Both halves have a CuPy path
(gpu_ops/kernels/color_transfer.cu); the Lab transfer round-trips.
"""

import logging
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import get_kernel, is_device_array, require_cupy
from gpu_ops.errors import InvalidFrameError

logger = logging.getLogger(__name__)

Image = NDArray[np.uint8]
Weights = NDArray[np.float32]
Ratio = NDArray[np.float32]  # [gh, gw, 3] target/source low-frequency ratio per coarse cell

SHADING_RATIO_LIMITS = (0.3, 3.0)  # beyond these the source and target are not the same surface
_RATIO_OFFSET = 6.0  # levels added to both sides: keeps dark pixels from exploding the ratio


def _check(patch: Image, reference: Image, weights: Weights) -> None:
    if patch.shape != reference.shape or patch.ndim != 3 or patch.shape[2] != 3:
        raise InvalidFrameError(
            f"colour transfer needs two equal H x W x 3 images, got {patch.shape}, {reference.shape}"
        )
    if weights.shape != patch.shape[:2]:
        raise InvalidFrameError(f"weights {weights.shape} do not match the images {patch.shape[:2]}")


def _coarse_weights(weights: Weights, grid: tuple[int, int]) -> NDArray[np.float32]:
    """The weights' coarse average on a (gw, gh) grid, blurred, at least 1e-4: `_low_frequency`'s divisor."""
    total = cv2.resize(weights, grid, interpolation=cv2.INTER_AREA)
    total = cv2.GaussianBlur(total, (0, 0), 1.0, borderType=cv2.BORDER_REPLICATE)
    return np.maximum(total, np.float32(1e-4))


def _low_frequency(
    image: Image, weights_3: NDArray[np.float32], total: NDArray[np.float32], grid: tuple[int, int]
) -> NDArray[np.float32]:
    """Mask-normalised coarse average of a uint8 image on a (gw, gh) grid, filled where weights are
    empty: `weights_3` the weights in 3 channels, `total` from `_coarse_weights` (both made once for
    the patch and the reference). The float32 products are NumPy's `image * weights[..., None]`."""
    weighted = cv2.resize(
        cv2.multiply(image, weights_3, dtype=cv2.CV_32F), grid, interpolation=cv2.INTER_AREA
    )
    weighted = cv2.GaussianBlur(weighted, (0, 0), 1.0, borderType=cv2.BORDER_REPLICATE)
    return np.asarray(weighted / total[..., None], np.float32)


def shading_grid(size: tuple[int, int], cell_px: float) -> tuple[int, int]:
    """The coarse grid (gw, gh) for a (w, h) patch: cells of about `cell_px`, at least 2 x 2."""
    width, height = size
    return max(2, round(width / cell_px)), max(2, round(height / cell_px))


def match_shading_cpu(patch: Image, reference: Image, weights: Weights, *, cell_px: float = 16.0) -> Image:
    """`patch` relit so its low-frequency shading equals `reference`'s (see module docstring)."""
    grid = shading_grid((patch.shape[1], patch.shape[0]), cell_px)
    return apply_shading_ratio_cpu(patch, shading_ratio_cpu(patch, reference, weights, grid))


def shading_ratio_cpu(patch: Image, reference: Image, weights: Weights, grid: tuple[int, int]) -> Ratio:
    """The [gh, gw, 3] float32 ratio target/source of the low frequencies on a (gw, gh) grid.

    The first half of `match_shading_cpu`, apart so a stream can smooth the ratio over time before
    `apply_shading_ratio_cpu` uses it (skin tone must not pump from frame to frame).
    """
    _check(patch, reference, weights)
    weights = np.ascontiguousarray(weights, np.float32)
    weights_3 = np.asarray(cv2.merge([weights] * 3), np.float32)
    total = _coarse_weights(weights, grid)
    low_patch = _low_frequency(patch, weights_3, total, grid)
    low_reference = _low_frequency(reference, weights_3, total, grid)
    ratio = np.clip((low_reference + _RATIO_OFFSET) / (low_patch + _RATIO_OFFSET), *SHADING_RATIO_LIMITS)
    return np.ascontiguousarray(ratio, np.float32)


def apply_shading_ratio_cpu(patch: Image, ratio: Ratio) -> Image:
    """`patch` times the ratio grid upsampled to its size (cv2.resize INTER_LINEAR), rounded to uint8."""
    height, width = patch.shape[:2]
    ratio_full = cv2.resize(ratio, (width, height), interpolation=cv2.INTER_LINEAR)
    # the float32 product, as NumPy's
    relit = np.asarray(cv2.multiply(patch, ratio_full, dtype=cv2.CV_32F), np.float32)
    relit += np.float32(0.5)
    return np.clip(relit, 0, 255, out=relit).astype(np.uint8)


def transfer_lab_statistics_cpu(patch: Image, reference: Image, weights: Weights) -> Image:
    """`patch` with the weighted Lab mean and std of `reference` (one global match)."""
    _check(patch, reference, weights)
    patch_lab = cv2.cvtColor(patch, cv2.COLOR_RGB2LAB).astype(np.float32)
    reference_lab = cv2.cvtColor(reference, cv2.COLOR_RGB2LAB).astype(np.float32)
    weight_sum = float(weights.sum())
    if weight_sum < 1.0:
        return patch.copy()

    def statistics(lab: NDArray[np.float32]) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        mean = (lab * weights[..., None]).sum(axis=(0, 1)) / weight_sum
        variance = (((lab - mean) ** 2) * weights[..., None]).sum(axis=(0, 1)) / weight_sum
        return mean, np.sqrt(np.maximum(variance, 1.0))

    patch_mean, patch_std = statistics(patch_lab)
    reference_mean, reference_std = statistics(reference_lab)
    matched = (patch_lab - patch_mean) * (reference_std / patch_std) + reference_mean
    return cv2.cvtColor(np.clip(matched + 0.5, 0, 255).astype(np.uint8), cv2.COLOR_LAB2RGB)


def shading_gaussian() -> NDArray[np.float32]:
    """The 1-D taps `_low_frequency`'s GaussianBlur (sigma 1, float32 input) uses: 9 of them."""
    return np.asarray(cv2.getGaussianKernel(9, 1.0, ktype=cv2.CV_32F), np.float32).ravel()


def match_shading_gpu(patch: Any, reference: Any, weights: Any, *, cell_px: float = 16.0) -> Any:
    """`match_shading_cpu` on the device (CuPy in and out; within 1 level of the CPU mirror).

    `reference` may be a strided view (a box of the frame); nothing is copied to the host.
    """
    grid = shading_grid((int(patch.shape[1]), int(patch.shape[0])), cell_px)
    return apply_shading_ratio_gpu(patch, shading_ratio_gpu(patch, reference, weights, grid))


def shading_ratio_gpu(patch: Any, reference: Any, weights: Any, grid: tuple[int, int]) -> Any:
    """`shading_ratio_cpu` on the device: a CuPy [gh, gw, 3] ratio (cells and ratio kernels)."""
    cupy = require_cupy()
    patch, reference = _pixel_rows(cupy, patch), _pixel_rows(cupy, reference)
    weights = cupy.ascontiguousarray(cupy.asarray(weights, cupy.float32))
    _check(patch, reference, weights)
    height, width = patch.shape[:2]
    grid_width, grid_height = grid
    cells = cupy.empty((grid_height, grid_width, 7), cupy.float32)
    ratio = cupy.empty((grid_height, grid_width, 3), cupy.float32)
    area_x, area_y = 1.0 / (grid_width / width), 1.0 / (grid_height / height)  # cv2.resize's own scales
    cell_grid = ((grid_width + 15) // 16, (grid_height + 15) // 16, 1)
    get_kernel("color_transfer", "shading_cells")(
        cell_grid, (16, 16, 1),
        (patch, np.int32(patch.strides[0]), reference, np.int32(reference.strides[0]), weights,
         np.int32(weights.strides[0]), np.int32(width), np.int32(height), np.int32(grid_width),
         np.int32(grid_height), np.float64(area_x), np.float64(area_y), cells),
    )  # fmt: skip
    gaussian = cupy.asarray(shading_gaussian())
    low, high = SHADING_RATIO_LIMITS
    get_kernel("color_transfer", "shading_ratio")(
        cell_grid, (16, 16, 1),
        (cells, np.int32(grid_width), np.int32(grid_height), gaussian, np.int32(gaussian.size),
         np.float32(low), np.float32(high), np.float32(_RATIO_OFFSET), ratio),
    )  # fmt: skip
    return ratio


def apply_shading_ratio_gpu(patch: Any, ratio: Any) -> Any:
    """`apply_shading_ratio_cpu` on the device (the apply_shading kernel); CuPy in and out."""
    cupy = require_cupy()
    patch = _pixel_rows(cupy, patch)
    ratio = cupy.ascontiguousarray(cupy.asarray(ratio, cupy.float32))
    height, width = patch.shape[:2]
    grid_height, grid_width = ratio.shape[:2]
    out = cupy.empty((height, width, 3), cupy.uint8)
    linear_x, linear_y = 1.0 / (width / grid_width), 1.0 / (height / grid_height)
    get_kernel("color_transfer", "apply_shading")(
        ((width + 31) // 32, (height + 7) // 8, 1), (32, 8, 1),
        (patch, np.int32(patch.strides[0]), ratio, np.int32(grid_width), np.int32(grid_height),
         np.float64(linear_x), np.float64(linear_y), out, np.int32(width), np.int32(height)),
    )  # fmt: skip
    return out


def _pixel_rows(cupy: Any, image: Any) -> Any:
    """`image` as a CuPy uint8 array whose rows hold packed pixels (row pitch free)."""
    image = cupy.asarray(image)
    if image.ndim == 3 and (image.strides[2] != 1 or image.strides[1] != image.shape[2]):
        image = cupy.ascontiguousarray(image)
    return image


def match_shading(patch: Any, reference: Any, weights: Any, *, cell_px: float = 16.0) -> Any:
    """Dispatcher: `match_shading_gpu` for CuPy input, else `match_shading_cpu`."""
    if is_device_array(patch):
        return match_shading_gpu(patch, reference, weights, cell_px=cell_px)
    return match_shading_cpu(patch, reference, weights, cell_px=cell_px)


def shading_ratio(patch: Any, reference: Any, weights: Any, grid: tuple[int, int]) -> Any:
    """Dispatcher: `shading_ratio_gpu` for CuPy input, else `shading_ratio_cpu`."""
    if is_device_array(patch):
        return shading_ratio_gpu(patch, reference, weights, grid)
    return shading_ratio_cpu(patch, reference, weights, grid)


def apply_shading_ratio(patch: Any, ratio: Any) -> Any:
    """Dispatcher: `apply_shading_ratio_gpu` for CuPy input, else `apply_shading_ratio_cpu`."""
    if is_device_array(patch):
        return apply_shading_ratio_gpu(patch, ratio)
    return apply_shading_ratio_cpu(patch, ratio)


def transfer_lab_statistics(patch: Any, reference: Any, weights: Any) -> Any:
    """Dispatcher: see `match_shading`."""
    if is_device_array(patch):
        cupy = require_cupy()
        host = transfer_lab_statistics_cpu(
            cupy.asnumpy(patch), cupy.asnumpy(reference), cupy.asnumpy(weights)
        )
        return cupy.asarray(host)
    return transfer_lab_statistics_cpu(patch, reference, weights)
