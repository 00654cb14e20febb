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

One formula for NumPy and CuPy arrays (array-module generic: elementwise steps and two reductions), so
the CPU mirror and the device path are the same code, apart from the blur: OpenCV's on the host, the
same taps as shifted sums on the device (`smoothed_generic`, checked against OpenCV on NumPy). On the
device nothing crosses the bus: the mean stays a device scalar.
"""

from types import ModuleType
from typing import Any

import cv2
import numpy as np

from gpu_ops.backend import get_array_module, is_device_array
from gpu_ops.errors import InvalidFrameError

_LUMA = (0.299, 0.587, 0.114)  # BT.601, as the skin model
SMOOTHING_SIGMA = 1.5
# cv2.GaussianBlur's own kernel for a float image at this sigma: 13 taps (4 sigmas each side)
_TAPS = cv2.getGaussianKernel(13, SMOOTHING_SIGMA, cv2.CV_32F).ravel()
_MIN_WEIGHT = 1.0  # below this much interior weight (a face a few pixels wide) nothing is guarded


def smoothed_generic(xp: ModuleType, plane: Any) -> Any:
    """The Gaussian blur of a float32 H x W plane as shifted sums (mirrored border, OpenCV's
    BORDER_REFLECT_101), for any array module; what the device runs."""
    height, width = plane.shape
    reach = len(_TAPS) // 2
    if min(height, width) <= reach:  # too small to mirror: the plane's mean everywhere
        return xp.full_like(plane, plane.mean())
    padded = xp.pad(plane, reach, mode="reflect")
    rows = sum(float(tap) * padded[:, k : k + width] for k, tap in enumerate(_TAPS))
    return sum(float(tap) * rows[k : k + height, :] for k, tap in enumerate(_TAPS)).astype(xp.float32)


def _smoothed(xp: ModuleType, plane: Any) -> Any:
    if is_device_array(plane) or min(plane.shape) <= len(_TAPS) // 2:
        return smoothed_generic(xp, plane)
    return cv2.sepFilter2D(plane, cv2.CV_32F, _TAPS, _TAPS, borderType=cv2.BORDER_REFLECT_101)


def rim_guard(region: Any, alpha: Any, zone: Any, dark_limits: tuple[float, float]) -> Any:
    """The float32 H x W factor (0..1) to multiply the paste weights by: 1 off the zone and wherever the
    target is at least `dark_limits[1]` of its face's mean luma, 0 in the zone where it is darker than
    `dark_limits[0]`. `region`: uint8 H x W x 3 (the frame's face box), `alpha` the paste weights and
    `zone` the outline zone, float32 H x W; all NumPy or all CuPy."""
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
    xp = get_array_module(region)
    pixels = region.astype(xp.float32)
    luma = _smoothed(xp, pixels[..., 0] * _LUMA[0] + pixels[..., 1] * _LUMA[1] + pixels[..., 2] * _LUMA[2])
    interior = alpha * (1.0 - zone)
    total = interior.sum()
    mean = (luma * interior).sum() / xp.maximum(total, _MIN_WEIGHT)
    # a face with no interior weight (a few pixels wide) is not guarded: its mean means nothing
    relative = luma / xp.maximum(mean, np.float32(1.0))
    lit = xp.clip((relative - low) / (high - low), 0.0, 1.0) * (total >= _MIN_WEIGHT) + (total < _MIN_WEIGHT)
    lit = lit * lit * (3.0 - 2.0 * lit)
    return (1.0 - zone * (1.0 - lit)).astype(xp.float32)
