"""Keep the target's own dark rim: what lies inside the mesh outline but is not the target's lit face.

The face mesh's outline is a fit, not a segmentation. On a real frame it runs a few pixels past the
face into the dark background beyond a jaw, across the shadow under a chin, over a dark fringe at the
temples. Pasting the source's skin there moves the face's contour: a new edge of skin against
background or shadow appears along the outline, beside the target's own (the seam the eye sees on a
broad smile or a slightly turned head).

So, per frame, in a zone along the outline (`zone`, 1 at the outline falling to 0 inwards, warped from
the source texture with the paste mask), the paste weight is lowered where the target is much darker
than its own face: its luma (smoothed, Gaussian sigma 1.5 px, so pores do not speckle the mask) over the
paste-weighted mean luma of the face's interior, ramped between `dark_limits`. Only darker, not brighter:
a highlight on a forehead is brighter than the face's mean and is skin. What is guarded is the target's
own content, so nothing depends on the source: a beard, a shadow or hair of the source is judged
elsewhere (mesh_skin.py).

Two paths with one formula: `rim_guard_cpu` (OpenCV and in-place NumPy: about 0.1 ms on a 200 x 250
face box) and `rim_guard_generic` (array-module generic: elementwise steps, shifted sums for the blur
and two reductions), which the device runs and the tests check against the CPU path on NumPy. On the
device nothing crosses the bus: the mean stays a device scalar.
"""

from types import ModuleType
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import get_array_module, is_device_array
from gpu_ops.errors import InvalidFrameError

# BT.601 luma in OpenCV's fixed point (cv2.COLOR_RGB2GRAY on uint8: (sum + 2^13) >> 14)
_LUMA_FIXED = (4899, 9617, 1868)
SMOOTHING_SIGMA = 1.5
# cv2.GaussianBlur's own kernel for a float image at this sigma: 13 taps (4 sigmas each side)
_TAPS = cv2.getGaussianKernel(13, SMOOTHING_SIGMA, cv2.CV_32F).ravel()
_REACH = len(_TAPS) // 2
_MIN_WEIGHT = 1.0  # below this much interior weight (a face a few pixels wide) nothing is guarded


def _check(region: Any, alpha: Any, zone: Any, dark_limits: tuple[float, float]) -> None:
    if (
        region.ndim != 3
        or region.shape[2] != 3
        or alpha.shape != region.shape[:2]
        or zone.shape != alpha.shape
    ):
        raise InvalidFrameError(
            f"rim guard needs an H x W x 3 region and two H x W planes, got {region.shape}, "
            f"{alpha.shape}, {zone.shape}"
        )
    low, high = dark_limits
    if not 0.0 <= low < high:
        raise ValueError(f"dark_limits must rise from 0 or more, got {dark_limits}")


def smoothed_generic(xp: ModuleType, plane: Any) -> Any:
    """The Gaussian blur of a float32 H x W plane as shifted sums (mirrored border, OpenCV's
    BORDER_REFLECT_101), for any array module; a plane too small to mirror gets its mean everywhere."""
    height, width = plane.shape
    if min(height, width) <= _REACH:
        return xp.full_like(plane, plane.mean())
    padded = xp.pad(plane, _REACH, mode="reflect")
    rows = sum(float(tap) * padded[:, k : k + width] for k, tap in enumerate(_TAPS))
    return sum(float(tap) * rows[k : k + height, :] for k, tap in enumerate(_TAPS)).astype(xp.float32)


def rim_guard_generic(region: Any, alpha: Any, zone: Any, dark_limits: tuple[float, float]) -> Any:
    """`rim_guard` for NumPy or CuPy arrays with array-module operations only: what the device runs."""
    _check(region, alpha, zone, dark_limits)
    low, high = dark_limits
    xp = get_array_module(region)
    pixels = region.astype(xp.int32)
    fixed = (
        pixels[..., 0] * _LUMA_FIXED[0] + pixels[..., 1] * _LUMA_FIXED[1] + pixels[..., 2] * _LUMA_FIXED[2]
    )
    luma = ((fixed + (1 << 13)) >> 14).astype(xp.float32)
    interior = (alpha * (1.0 - zone)).astype(xp.float32)
    total = interior.sum()
    mean = (luma * interior).sum() / xp.maximum(total, _MIN_WEIGHT)
    relative = smoothed_generic(xp, luma) / xp.maximum(mean, np.float32(1.0))
    # a face with no interior weight (a few pixels wide) is not guarded: its mean means nothing
    lit = xp.clip((relative - low) / (high - low), 0.0, 1.0) * (total >= _MIN_WEIGHT) + (total < _MIN_WEIGHT)
    lit = lit * lit * (3.0 - 2.0 * lit)
    return (1.0 - zone * (1.0 - lit)).astype(xp.float32)


def rim_guard_cpu(
    region: NDArray[np.uint8],
    alpha: NDArray[np.float32],
    zone: NDArray[np.float32],
    dark_limits: tuple[float, float],
) -> NDArray[np.float32]:
    """`rim_guard` on the host: OpenCV for the luma and the blur, NumPy in place for the rest."""
    _check(region, alpha, zone, dark_limits)
    if min(region.shape[:2]) <= _REACH:
        return rim_guard_generic(region, alpha, zone, dark_limits)  # type: ignore[no-any-return]
    low, high = dark_limits
    luma = cv2.cvtColor(np.ascontiguousarray(region), cv2.COLOR_RGB2GRAY)
    interior = np.subtract(np.float32(1.0), zone, dtype=np.float32)
    np.multiply(interior, alpha, out=interior)
    total = float(interior.sum())
    if total < _MIN_WEIGHT:
        return np.ones(zone.shape, np.float32)
    mean = max(float(np.dot(luma.ravel().astype(np.float32), interior.ravel())) / total, 1.0)
    lit = cv2.sepFilter2D(luma, cv2.CV_32F, _TAPS, _TAPS, borderType=cv2.BORDER_REFLECT_101)
    # (luma / mean - low) / (high - low) in one scaled subtraction, then the smoothstep in place
    np.multiply(lit, np.float32(1.0 / (mean * (high - low))), out=lit)
    np.subtract(lit, np.float32(low / (high - low)), out=lit)
    np.clip(lit, 0.0, 1.0, out=lit)
    ramp = np.multiply(lit, np.float32(-2.0))
    np.add(ramp, np.float32(3.0), out=ramp)
    np.multiply(ramp, lit, out=ramp)
    np.multiply(ramp, lit, out=ramp)  # lit^2 (3 - 2 lit)
    np.subtract(np.float32(1.0), ramp, out=ramp)
    np.multiply(ramp, zone, out=ramp)
    return np.subtract(np.float32(1.0), ramp, out=ramp)


def rim_guard(region: Any, alpha: Any, zone: Any, dark_limits: tuple[float, float]) -> Any:
    """The float32 H x W factor (0..1) to multiply the paste weights by: 1 off the zone and wherever the
    target is at least `dark_limits[1]` of its face's mean luma, 0 in the zone where it is darker than
    `dark_limits[0]`. `region`: uint8 H x W x 3 (the frame's face box), `alpha` the paste weights and
    `zone` the outline zone, float32 H x W; all NumPy or all CuPy (dispatcher of the two paths)."""
    if is_device_array(region):
        return rim_guard_generic(region, alpha, zone, dark_limits)
    return rim_guard_cpu(region, alpha, zone, dark_limits)
