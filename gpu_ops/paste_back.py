"""Paste a swapped face crop back into its frame: only the face's box is touched, every frame, every face.

The classic paste (insightface, FaceFusion) warps the crop AND the mask over the whole frame and
blends everything: two full-frame warps per face. Here both warps cover only the box the crop can
reach (its corners mapped back to the frame, clipped, plus a 1 px margin), sampling the crop at the
very 1/32-px positions the classic full-frame warp uses (same matrix, absolute frame coordinates, fed
to cv2.remap as fixed-point maps): the same bits at a fraction of the cost. Pixels outside the returned box are never written. The soft mask is built
once in crop space by the caller; it is warped here, never blurred per frame.
"""

import logging
import math
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.affine_crop import opencv_inverse_matrices
from gpu_ops.backend import get_kernel, is_device_array, require_cupy, to_host
from gpu_ops.errors import InvalidFrameError

logger = logging.getLogger(__name__)

Box = tuple[int, int, int, int]  # x1, y1, x2, y2 in frame px; x2, y2 exclusive
CropMask = NDArray[np.float32]  # [h,w] in [0,1], crop space
_BLOCK_2D = (32, 8, 1)


def face_box(affine_matrix: Any, crop_size: tuple[int, int], frame_size: tuple[int, int]) -> Box:
    """Frame-space box a crop of `crop_size` (w, h) can reach through frame -> crop `affine_matrix`.

    Bilinear sampling reads crop pixels for crop coordinates in (-1, w) x (-1, h); those corners are
    mapped back to the frame, rounded outwards, given 1 px of margin and clipped to `frame_size`.
    An empty box (x2 == x1 or y2 == y1) means the face is outside the frame.
    """
    matrix = np.asarray(to_host(affine_matrix), dtype=np.float64).reshape(2, 3)
    crop_width, crop_height = crop_size
    frame_width, frame_height = frame_size
    inverse = cv2.invertAffineTransform(matrix)
    corners = np.array([[-1, -1], [crop_width, -1], [-1, crop_height], [crop_width, crop_height]], np.float64)
    mapped = corners @ inverse[:, :2].T + inverse[:, 2]
    x1 = min(max(math.floor(mapped[:, 0].min()) - 1, 0), frame_width)
    y1 = min(max(math.floor(mapped[:, 1].min()) - 1, 0), frame_height)
    x2 = max(min(math.ceil(mapped[:, 0].max()) + 2, frame_width), x1)
    y2 = max(min(math.ceil(mapped[:, 1].max()) + 2, frame_height), y1)
    return x1, y1, x2, y2


def classic_sampling_matrix(affine_matrix: Any) -> NDArray[np.float64]:
    """Frame -> crop matrix exactly as the classic paste ends up using it, float64 [6].

    The classic paste calls cv2.warpAffine(crop, invertAffineTransform(M)), and warpAffine inverts
    that matrix again internally. Using the same twice-inverted matrix, and absolute frame coordinates,
    makes our box-limited sampling land on the same 1/32-px positions as the full-frame warp.
    """
    matrix = np.asarray(to_host(affine_matrix), dtype=np.float32).reshape(2, 3)
    return opencv_inverse_matrices(cv2.invertAffineTransform(matrix))[0]


def sampling_maps(
    frame_to_crop: NDArray[np.float64], box: Box
) -> tuple[NDArray[np.int16], NDArray[np.uint16]]:
    """cv2.remap fixed-point maps (int16 xy, uint16 1/32-px fraction index) that warpAffine builds for the box."""
    x1, y1, x2, y2 = box
    m = frame_to_crop
    columns = np.arange(x1, x2, dtype=np.float64)
    rows = np.arange(y1, y2, dtype=np.float64)
    fixed_x = (np.rint((m[1] * rows + m[2]) * 1024).astype(np.int32)[:, None] + 16 + np.rint(m[0] * columns * 1024).astype(np.int32)) >> 5  # fmt: skip
    fixed_y = (np.rint((m[4] * rows + m[5]) * 1024).astype(np.int32)[:, None] + 16 + np.rint(m[3] * columns * 1024).astype(np.int32)) >> 5  # fmt: skip
    coordinates = np.empty((*fixed_x.shape, 2), dtype=np.int16)
    coordinates[..., 0] = np.clip(fixed_x >> 5, -32768, 32767)
    coordinates[..., 1] = np.clip(fixed_y >> 5, -32768, 32767)
    fractions = ((fixed_y & 31) << 5 | (fixed_x & 31)).astype(np.uint16)
    return coordinates, fractions


def _check_inputs(frame: Any, crop: Any, crop_mask: Any) -> None:
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise InvalidFrameError(f"frame must be uint8 H x W x 3, got {frame.dtype} {frame.shape}")
    if crop.ndim != 3 or crop.shape[2] != 3 or crop.dtype != np.uint8:
        raise InvalidFrameError(f"crop must be uint8 h x w x 3, got {crop.dtype} {crop.shape}")
    if crop_mask.shape != crop.shape[:2] or crop_mask.dtype != np.float32:
        raise InvalidFrameError(
            f"crop_mask must be float32 {crop.shape[:2]}, got {crop_mask.dtype} {crop_mask.shape}"
        )


def paste_back_cpu(
    frame: NDArray[np.uint8], crop: NDArray[np.uint8], affine_matrix: Any, crop_mask: CropMask
) -> Box:
    """Blend `crop` into `frame` in place through frame -> crop `affine_matrix`; returns the box written."""
    _check_inputs(frame, crop, crop_mask)
    crop_height, crop_width = crop.shape[:2]
    box = face_box(affine_matrix, (crop_width, crop_height), (frame.shape[1], frame.shape[0]))
    x1, y1, x2, y2 = box
    if x2 <= x1 or y2 <= y1:
        return box
    coordinates, fractions = sampling_maps(classic_sampling_matrix(affine_matrix), box)
    warped_crop = cv2.remap(crop, coordinates, fractions, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    warped_mask = cv2.remap(
        crop_mask, coordinates, fractions, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT
    )
    region = frame[y1:y2, x1:x2]
    mask = warped_mask[..., None]
    blended = mask * warped_crop.astype(np.float32) + (np.float32(1.0) - mask) * region.astype(np.float32)
    np.clip(np.rint(blended), 0, 255, out=blended)
    region[...] = blended.astype(np.uint8)
    return box


def paste_back_gpu(frame: Any, crop: Any, affine_matrix: Any, crop_mask: Any) -> Box:
    """`paste_back_cpu` on CuPy arrays: one launch over the face's box, frame modified in place."""
    cupy = require_cupy()
    _check_inputs(frame, crop, crop_mask)
    if frame.strides[1] != 3 or frame.strides[2] != 1:
        raise InvalidFrameError("frame rows may be pitched but pixels must be packed RGB (modified in place)")
    crop = cupy.ascontiguousarray(crop)
    crop_mask = cupy.ascontiguousarray(crop_mask)
    crop_height, crop_width = crop.shape[:2]
    box = face_box(affine_matrix, (crop_width, crop_height), (frame.shape[1], frame.shape[0]))
    x1, y1, x2, y2 = box
    if x2 <= x1 or y2 <= y1:
        return box
    matrix = cupy.asarray(classic_sampling_matrix(affine_matrix))
    grid = ((x2 - x1 + 31) // 32, (y2 - y1 + 7) // 8, 1)
    get_kernel("paste_back", "paste_back")(
        grid,
        _BLOCK_2D,
        (
            frame, np.int32(frame.strides[0]), crop, crop_mask, np.int32(crop_width), np.int32(crop_height),
            matrix, np.int32(x1), np.int32(y1), np.int32(x2 - x1), np.int32(y2 - y1),
        ),
    )  # fmt: skip
    return box


def paste_back(frame: Any, crop: Any, affine_matrix: Any, crop_mask: Any) -> Box:
    """Blend a face crop back into its frame in place (NumPy -> OpenCV, CuPy -> CUDA kernel).

    `affine_matrix` maps frame -> crop (the matrix the crop was cut with); `crop_mask` float32 [h,w]
    in [0,1] weights the crop. Only pixels inside the returned box (x1, y1, x2, y2; exclusive ends)
    can change; the CPU result equals the classic full-frame two-warpAffine blend (rounded) bit for bit,
    the GPU kernel is within 1 level of it.
    """
    if is_device_array(frame):
        return paste_back_gpu(frame, crop, affine_matrix, crop_mask)
    return paste_back_cpu(frame, crop, affine_matrix, crop_mask)
