"""2-D similarity and affine maths for alignment: 5 points -> crop matrix, its inverse, point mapping.

Matrices are [2,3] (or batched [N,2,3]) and map frame -> crop in the cv2.warpAffine convention.
Every function is written once against the array module of its input, so it runs on NumPy or CuPy
arrays alike; the inputs are tiny, the point is to avoid a device round trip, not speed.
"""

import logging
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import get_array_module
from gpu_ops.errors import InvalidFrameError

logger = logging.getLogger(__name__)

AffineMatrix = NDArray[np.float32]  # [2,3] or [N,2,3], frame -> crop
Points = NDArray[np.float32]  # [P,2] or [N,P,2]


def estimate_similarity(src_points: Any, dst_points: Any) -> Any:
    """Least-squares similarity (rotation, uniform scale, translation; no reflection) src -> dst.

    This is Umeyama's estimate restricted to 2-D, in closed form: with centred points, scale*cos and
    scale*sin are the normalised dot and cross sums. `src_points` [P,2] or [N,P,2]; `dst_points`
    [P,2] (a template shared by the batch) or the same shape as `src_points`. Returns float32 [2,3]
    or [N,2,3]. Degenerate input (all source points equal) raises InvalidFrameError.
    """
    xp = get_array_module(src_points)
    src = xp.asarray(src_points, dtype=xp.float64)
    dst = xp.asarray(dst_points, dtype=xp.float64)
    if src.shape[-1] != 2 or src.ndim not in (2, 3) or src.shape[-2] < 2:
        raise InvalidFrameError(f"src_points must be [P,2] or [N,P,2] with P >= 2, got {src.shape}")
    if dst.shape[-2:] != src.shape[-2:]:
        raise InvalidFrameError(f"dst_points {dst.shape} do not pair with src_points {src.shape}")
    src_mean = src.mean(axis=-2, keepdims=True)
    dst_mean = dst.mean(axis=-2, keepdims=True)
    src_centred = src - src_mean
    dst_centred = dst - dst_mean
    src_variance = (src_centred**2).sum(axis=(-2, -1))
    if bool(xp.any(src_variance <= 1e-12)):
        raise InvalidFrameError("source points are all the same point: no similarity transform")
    dot = (src_centred * dst_centred).sum(axis=(-2, -1))
    cross = (src_centred[..., 0] * dst_centred[..., 1] - src_centred[..., 1] * dst_centred[..., 0]).sum(
        axis=-1
    )
    scale_cos = dot / src_variance
    scale_sin = cross / src_variance
    batch_shape = scale_cos.shape
    matrix = xp.empty((*batch_shape, 2, 3), dtype=xp.float64)
    matrix[..., 0, 0] = scale_cos
    matrix[..., 0, 1] = -scale_sin
    matrix[..., 1, 0] = scale_sin
    matrix[..., 1, 1] = scale_cos
    linear = matrix[..., :2]
    translation = dst_mean[..., 0, :] - (linear @ src_mean[..., 0, :, None])[..., 0]
    if translation.shape != (*batch_shape, 2):
        translation = xp.broadcast_to(translation, (*batch_shape, 2))
    matrix[..., 2] = translation
    return matrix.astype(xp.float32)


def invert_affine(affine_matrix: Any) -> Any:
    """The inverse of a [2,3] (or [N,2,3]) affine matrix, as cv2.invertAffineTransform, float32."""
    xp = get_array_module(affine_matrix)
    matrix = xp.asarray(affine_matrix, dtype=xp.float64)
    if matrix.shape[-2:] != (2, 3):
        raise InvalidFrameError(f"affine matrix must be [2,3] or [N,2,3], got {matrix.shape}")
    determinant = matrix[..., 0, 0] * matrix[..., 1, 1] - matrix[..., 0, 1] * matrix[..., 1, 0]
    if bool(xp.any(xp.abs(determinant) < 1e-12)):
        raise InvalidFrameError("affine matrix is singular")
    inverse = xp.empty_like(matrix)
    inverse[..., 0, 0] = matrix[..., 1, 1] / determinant
    inverse[..., 0, 1] = -matrix[..., 0, 1] / determinant
    inverse[..., 1, 0] = -matrix[..., 1, 0] / determinant
    inverse[..., 1, 1] = matrix[..., 0, 0] / determinant
    inverse[..., 2] = -(inverse[..., :2] @ matrix[..., 2, None])[..., 0]
    return inverse.astype(xp.float32)


def transform_points(points: Any, affine_matrix: Any) -> Any:
    """Map points [P,2] / [N,P,2] through a [2,3] / [N,2,3] matrix; returns float32 of the points' shape."""
    xp = get_array_module(points)
    coordinates = xp.asarray(points, dtype=xp.float64)
    matrix = xp.asarray(affine_matrix, dtype=xp.float64)
    if coordinates.shape[-1] != 2 or matrix.shape[-2:] != (2, 3):
        raise InvalidFrameError(f"cannot map points {coordinates.shape} through a {matrix.shape} matrix")
    mapped = coordinates @ xp.swapaxes(matrix[..., :2], -1, -2) + matrix[..., None, :, 2]
    return mapped.astype(xp.float32)
