"""The target occlusion mask's two array ops on the frame's device: the face box averaged down to the mask's
working size (`cell_average`, so a device frame sends only that small copy over the bus), and the mask back
at the face box's size as the share of the swap each pixel shows (`show_weight`).

Cell average: each working pixel is the mean of a factor x factor cell of the box, the last partial row
and column padded by repeating the edge: `cell_average_cpu` (cv2.resize INTER_AREA at a whole factor,
OpenCV's fast path) and `cell_average_generic` (reshape and mean, any array module), equal within one
level (rounding).

Show weight:

The evidence is judged at a small working size (streamer/pipeline/swap_engines/mesh_occlusion.py); the
paste needs it at the box's size on the frame's own device, as `fade x (1 - mask)`, the weight the paste
mask and the blend's keep mask are multiplied by. Two paths with one formula, OpenCV's bilinear resize
(pixel centres at +0.5, edge pixels repeated): `show_weight_cpu` (cv2.resize) and `show_weight_generic`
(array-module generic gathers), which the device runs on a CuPy copy of the small mask (a few kB over the
bus) and the tests check against the CPU path on NumPy.
"""

from types import ModuleType
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import get_array_module, require_cupy, to_host
from gpu_ops.errors import InvalidFrameError


def _check(mask: NDArray[Any], size: tuple[int, int]) -> None:
    if mask.ndim != 2 or mask.dtype != np.float32 or size[0] < 1 or size[1] < 1:
        raise InvalidFrameError(
            f"occlusion mask must be H x W float32 and the size positive, got {mask.shape}"
        )


def _check_image(image: Any, factor: int) -> None:
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8 or factor < 1:
        raise InvalidFrameError(f"cell average needs H x W x 3 uint8 and a factor >= 1, got {image.shape}")


def cell_average_cpu(image: NDArray[np.uint8], factor: int) -> NDArray[np.uint8]:
    """[ceil(H/f), ceil(W/f), 3] uint8: the mean of each f x f cell (edge repeated into partial cells)."""
    _check_image(image, factor)
    if factor == 1:
        return image
    height, width = image.shape[:2]
    rows, columns = -(-height // factor) * factor, -(-width // factor) * factor
    padded: NDArray[Any] = image
    if rows != height or columns != width:
        padded = np.asarray(
            cv2.copyMakeBorder(image, 0, rows - height, 0, columns - width, cv2.BORDER_REPLICATE), np.uint8
        )
    size = (columns // factor, rows // factor)
    return np.asarray(cv2.resize(padded, size, interpolation=cv2.INTER_AREA))


def cell_average_generic(xp: ModuleType, image: Any, factor: int) -> Any:
    """`cell_average_cpu` for any array module (NumPy here, CuPy on the device)."""
    _check_image(image, factor)
    if factor == 1:
        return image
    height, width = image.shape[:2]
    rows, columns = -(-height // factor) * factor, -(-width // factor) * factor
    padded = xp.pad(image, ((0, rows - height), (0, columns - width), (0, 0)), mode="edge")
    cells = padded.reshape(rows // factor, factor, columns // factor, factor, 3).astype(xp.float32)
    return xp.clip(cells.mean(axis=(1, 3)) + 0.5, 0, 255).astype(xp.uint8)


def cell_average(image: Any, factor: int) -> NDArray[np.uint8]:
    """Dispatcher: the working-size copy on the host; a device image is averaged there and only the
    small copy crosses the bus."""
    xp = get_array_module(image)
    if xp is np:
        return cell_average_cpu(image, factor)
    return to_host(cell_average_generic(xp, image, factor))


def show_weight_cpu(mask: NDArray[np.float32], size: tuple[int, int], fade: float) -> NDArray[np.float32]:
    """[H, W] float32 = fade x (1 - mask resized to (W, H) = `size`)."""
    _check(mask, size)
    resized = cv2.resize(mask, size, interpolation=cv2.INTER_LINEAR) if mask.shape[::-1] != size else mask
    return (np.float32(fade) * (1.0 - np.clip(resized, 0.0, 1.0))).astype(np.float32)


def _axis(xp: ModuleType, out: int, inp: int) -> tuple[Any, Any, Any]:
    """Lower index, upper index and weight of OpenCV's bilinear sample along one axis."""
    position = (xp.arange(out, dtype=xp.float32) + 0.5) * (inp / out) - 0.5
    position = xp.maximum(position, 0.0)
    low = xp.minimum(xp.floor(position).astype(xp.int32), inp - 1)
    high = xp.minimum(low + 1, inp - 1)
    return low, high, (position - low).astype(xp.float32)


def show_weight_generic(xp: ModuleType, mask: Any, size: tuple[int, int], fade: float) -> Any:
    """`show_weight_cpu` for any array module (NumPy here, CuPy on the device)."""
    _check(mask, size)
    width, height = size
    rows_low, rows_high, row_weight = _axis(xp, height, mask.shape[0])
    cols_low, cols_high, col_weight = _axis(xp, width, mask.shape[1])
    top = mask[rows_low][:, cols_low] * (1.0 - col_weight) + mask[rows_low][:, cols_high] * col_weight
    bottom = mask[rows_high][:, cols_low] * (1.0 - col_weight) + mask[rows_high][:, cols_high] * col_weight
    resized = top * (1.0 - row_weight[:, None]) + bottom * row_weight[:, None]
    return (xp.float32(fade) * (1.0 - xp.clip(resized, 0.0, 1.0))).astype(xp.float32)


def show_weight(mask: NDArray[np.float32], size: tuple[int, int], fade: float, like: Any) -> Any:
    """Dispatcher: the weight on the device of `like` (a frame region); the small host mask is uploaded."""
    xp = get_array_module(like)
    if xp is np:
        return show_weight_cpu(mask, size, fade)
    return show_weight_generic(xp, require_cupy().asarray(mask), size, fade)
