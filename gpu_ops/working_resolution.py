"""Swap a large face at a capped working size, composite it back at full resolution.

The mesh engine's cost grows with the face's pixel count (a 720p close-up is four times a 480p face),
yet the source texture holds about 230 px of face height: warping, shading and blending it at a
box of ~288 px loses almost nothing the source has. What the small swap cannot keep is the target's
own fine detail where the target stays (eyes, mouth, outline, everything outside the face), so the
composite adds that detail back:

    out = up(B_s) + (1 - up(a_s)) * (T - up(T_s))

with T the full-resolution region, T_s its shrunk copy, B_s the swapped small region and a_s the paste
alpha, up() bicubic (bilinear loses up to a fifth of the pasted face's fine detail on some pairs;
bicubic keeps 92-100 % of what a full-size swap shows). Where nothing is pasted (a_s = 0, B_s = T_s)
the region comes back bit-exact; where the source shows fully, the upsampled swap. Host only: the device path swaps at full resolution (docs/gpu.md).

Where a whole factor k lands the box near the cap (`whole_factor`), the box is grown to a multiple of k
(streamer/pipeline/swap_engines/mesh_geometry.py) and shrunk by k: OpenCV's area average is then a
plain k x k mean, a tenth of the fractional one's cost, and as sharp.
"""

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.errors import InvalidInputError

Image = NDArray[np.uint8]
Size = tuple[int, int]  # width, height


# a box up to this much larger than the cap is swapped as it is: resampling would cost more than it saves
# (a 640x480 face, ~300 px, stays exactly as before)
SLACK = 1.15
UPSAMPLING = cv2.INTER_CUBIC  # the same for the swap and the target, so unpasted pixels come back exact
# a box is shrunk by a whole factor when that lands between this share of the cap and SLACK times it: an
# area average by a whole factor is a plain k x k mean in OpenCV (0.1 ms for a 720p close-up's box),
# by a fractional one a weighted sum per output pixel (1.5-2.4 ms)
WHOLE_FLOOR = 0.8


def working_size(size: Size, cap_px: int | None) -> Size | None:
    """The (w, h) to swap a box of `size` at by a fractional shrink to the cap, or None when it is within
    the cap (swap as it is); `whole_factor` says where a whole factor does better."""
    width, height = size
    if cap_px is None or max(width, height) <= cap_px * SLACK:
        return None
    if cap_px < 16:
        raise InvalidInputError(f"working resolution {cap_px} px is too small (at least 16)")
    scale = cap_px / max(width, height)
    return max(2, round(width * scale)), max(2, round(height * scale))


def whole_factor(size: Size, cap_px: int | None) -> int | None:
    """The whole factor k >= 2 a box of `size` is shrunk by, or None when none lands it between
    WHOLE_FLOOR and SLACK times the cap (then `working_size`'s fractional size, or no shrink at all)."""
    longest = max(size)
    if cap_px is None or cap_px < 16 or longest <= cap_px * SLACK:
        return None
    factor = max(2, round(longest / cap_px))
    if cap_px * WHOLE_FLOOR <= longest / factor <= cap_px * SLACK:
        return factor
    return None


def shrink(region: Image, size: Size) -> Image:
    """`region` at `size` by pixel-area averaging (no aliasing of skin texture)."""
    return np.ascontiguousarray(cv2.resize(region, size, interpolation=cv2.INTER_AREA))


def scale_mesh(mesh: NDArray[np.float32], size: Size, small: Size) -> NDArray[np.float32]:
    """Mesh points of a `size` region in the pixels of its `small` copy (pixel centres map as
    cv2.resize maps them); z scales with the mean of the two axes."""
    sx, sy = small[0] / size[0], small[1] / size[1]
    scaled = np.array(mesh, np.float32, copy=True)
    scaled[:, 0] = (scaled[:, 0] + 0.5) * sx - 0.5
    scaled[:, 1] = (scaled[:, 1] + 0.5) * sy - 0.5
    if scaled.shape[1] > 2:
        scaled[:, 2:] *= (sx + sy) / 2
    return scaled


def composite_working_resolution(
    region: Image, small_target: Image, small_swapped: Image, alpha: NDArray[np.float32]
) -> None:
    """Write the small swap into the full-resolution `region` in place (the formula above)."""
    if small_target.shape != small_swapped.shape or alpha.shape != small_swapped.shape[:2]:
        raise InvalidInputError(
            f"working-resolution shapes differ: target {small_target.shape}, swap {small_swapped.shape}, "
            f"alpha {alpha.shape}"
        )
    height, width = region.shape[:2]
    full = (width, height)
    # fixed point in OpenCV's SIMD paths (1.4 ms for a 430 x 480 box, against 8 ms in float NumPy);
    # within 1 level of the float formula, and exact where nothing is pasted
    up_swapped = cv2.resize(small_swapped, full, interpolation=UPSAMPLING)
    up_target = cv2.resize(small_target, full, interpolation=UPSAMPLING)
    keep = cv2.convertScaleAbs(np.ascontiguousarray(alpha, np.float32), alpha=-255.0, beta=255.0)
    keep = cv2.resize(cv2.merge([keep, keep, keep]), full, interpolation=cv2.INTER_LINEAR)
    detail = cv2.subtract(region, up_target, dtype=cv2.CV_16S)
    kept = cv2.multiply(detail, keep, scale=1.0 / 255.0, dtype=cv2.CV_16S)
    region[...] = cv2.add(up_swapped, kept, dtype=cv2.CV_8U)
