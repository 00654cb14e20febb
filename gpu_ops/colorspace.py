"""YUV 4:2:0 <-> RGB for video frames: the first and last op of every frame on the hot path.

Conventions (DESIGN.md section 5): BT.601 limited range unless the stream says otherwise. YUV -> RGB
uses 2x2 nearest chroma and Q20 fixed point; for BT.601 limited the coefficients are OpenCV's, so
`i420_to_rgb_cpu` equals `cv2.cvtColor(..., COLOR_YUV2RGB_I420)` bit for bit and the CUDA kernel
mirrors the same integer maths. RGB -> YUV averages each 2x2 chroma block (OpenCV takes the top-left
sample; the average round-trips better); its Y plane equals OpenCV's. Planes may be strided views
of padded buffers (av.VideoFrame planes): rows may have any pitch, pixels must be adjacent.
"""

import logging
from dataclasses import dataclass
from typing import Any, Literal, get_args

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import get_kernel, is_device_array, require_cupy
from gpu_ops.errors import InvalidFrameError

logger = logging.getLogger(__name__)

Colorspace = Literal["bt601", "bt709"]
COLORSPACES: tuple[str, ...] = get_args(Colorspace)
Plane = NDArray[np.uint8]  # H x W (luma) or H/2 x W/2 (chroma), uint8, rows may be padded
RgbFrame = NDArray[np.uint8]  # H x W x 3 RGB, C-contiguous

FIXED_POINT_SHIFT = 20  # Q20, as OpenCV
_LUMA_RED_BLUE = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}  # (Kr, Kb) of each standard


@dataclass(frozen=True)
class YuvToRgbCoefficients:
    """Q20 integers: R = (cy*(Y-y0) + cvr*V' + half) >> 20, G adds cvg*V' + cug*U', B adds cub*U'."""

    luma: int
    v_to_red: int
    v_to_green: int
    u_to_green: int
    u_to_blue: int
    luma_offset: int  # 16 for limited range (Y below 16 is clamped to 16, as OpenCV), 0 for full


@dataclass(frozen=True)
class RgbToYuvCoefficients:
    """Q20 integers: Y = (ry*R + gy*G + by*B + (y0 << 20) + half) >> 20; U, V likewise around 128."""

    red_to_luma: int
    green_to_luma: int
    blue_to_luma: int
    red_to_u: int
    green_to_u: int
    blue_to_u: int
    red_to_v: int
    green_to_v: int
    blue_to_v: int
    luma_offset: int


# OpenCV's constants (modules/imgproc/src/color_yuv.simd.hpp, ITUR_BT_601_*): 3-digit rounded BT.601.
_OPENCV_BT601_LIMITED_TO_RGB = YuvToRgbCoefficients(1220542, 1673527, -852492, -409993, 2116026, 16)
_OPENCV_BT601_LIMITED_TO_YUV = RgbToYuvCoefficients(
    269484, 528482, 102760, -155188, -305135, 460324, 460324, -385875, -74448, 16
)


def _q20(value: float) -> int:
    return round(value * (1 << FIXED_POINT_SHIFT))


def yuv_to_rgb_coefficients(colorspace: Colorspace, full_range: bool) -> YuvToRgbCoefficients:
    """Fixed-point YUV -> RGB matrix: OpenCV's for BT.601 limited, else from the standard's Kr, Kb."""
    if colorspace not in _LUMA_RED_BLUE:
        raise InvalidFrameError(f"colorspace must be one of {COLORSPACES}, got {colorspace!r}")
    if colorspace == "bt601" and not full_range:
        return _OPENCV_BT601_LIMITED_TO_RGB
    red, blue = _LUMA_RED_BLUE[colorspace]
    green = 1.0 - red - blue
    luma_gain, chroma_gain = (1.0, 1.0) if full_range else (255.0 / 219.0, 255.0 / 224.0)
    return YuvToRgbCoefficients(
        luma=_q20(luma_gain),
        v_to_red=_q20(chroma_gain * 2.0 * (1.0 - red)),
        v_to_green=_q20(-chroma_gain * 2.0 * (1.0 - red) * red / green),
        u_to_green=_q20(-chroma_gain * 2.0 * (1.0 - blue) * blue / green),
        u_to_blue=_q20(chroma_gain * 2.0 * (1.0 - blue)),
        luma_offset=0 if full_range else 16,
    )


def rgb_to_yuv_coefficients(colorspace: Colorspace, full_range: bool) -> RgbToYuvCoefficients:
    """Fixed-point RGB -> YUV matrix: OpenCV's for BT.601 limited, else from the standard's Kr, Kb."""
    if colorspace not in _LUMA_RED_BLUE:
        raise InvalidFrameError(f"colorspace must be one of {COLORSPACES}, got {colorspace!r}")
    if colorspace == "bt601" and not full_range:
        return _OPENCV_BT601_LIMITED_TO_YUV
    red, blue = _LUMA_RED_BLUE[colorspace]
    green = 1.0 - red - blue
    luma_gain, chroma_gain = (1.0, 1.0) if full_range else (219.0 / 255.0, 224.0 / 255.0)
    u_gain = chroma_gain / (2.0 * (1.0 - blue))
    v_gain = chroma_gain / (2.0 * (1.0 - red))
    return RgbToYuvCoefficients(
        red_to_luma=_q20(luma_gain * red),
        green_to_luma=_q20(luma_gain * green),
        blue_to_luma=_q20(luma_gain * blue),
        red_to_u=_q20(-u_gain * red),
        green_to_u=_q20(-u_gain * green),
        blue_to_u=_q20(u_gain * (1.0 - blue)),
        red_to_v=_q20(v_gain * (1.0 - red)),
        green_to_v=_q20(-v_gain * green),
        blue_to_v=_q20(-v_gain * blue),
        luma_offset=0 if full_range else 16,
    )


def _check_planes(y: Any, u: Any, v: Any) -> tuple[int, int]:
    """Height and width of the frame; InvalidFrameError unless the planes form an even-sized 4:2:0 set."""
    for name, plane in (("y", y), ("u", u), ("v", v)):
        if plane.ndim != 2 or plane.dtype != np.uint8:
            raise InvalidFrameError(
                f"{name} plane must be a 2-D uint8 array, got {plane.dtype} {plane.shape}"
            )
        if plane.strides[1] != 1:
            raise InvalidFrameError(f"{name} plane pixels must be adjacent (column stride 1)")
    height, width = y.shape
    if height % 2 or width % 2:
        raise InvalidFrameError(f"4:2:0 frames need even width and height, got {width}x{height}")
    if u.shape != (height // 2, width // 2) or v.shape != (height // 2, width // 2):
        raise InvalidFrameError(f"chroma planes must be {width // 2}x{height // 2}, got {u.shape} {v.shape}")
    return height, width


def _check_rgb(rgb: Any) -> tuple[int, int]:
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise InvalidFrameError(f"RGB frame must be uint8 H x W x 3, got {rgb.dtype} {rgb.shape}")
    height, width = rgb.shape[:2]
    if height % 2 or width % 2:
        raise InvalidFrameError(f"4:2:0 frames need even width and height, got {width}x{height}: pad_to_even")
    return height, width


def pad_to_even(frame: RgbFrame) -> RgbFrame:
    """The frame itself when its size is even, else a copy with the last row/column repeated."""
    pad_bottom, pad_right = frame.shape[0] % 2, frame.shape[1] % 2
    if not (pad_bottom or pad_right):
        return frame
    return np.asarray(cv2.copyMakeBorder(frame, 0, pad_bottom, 0, pad_right, cv2.BORDER_REPLICATE), np.uint8)


def yuv420_to_rgb_fixed_point(y: Plane, u: Plane, v: Plane, coefficients: YuvToRgbCoefficients) -> RgbFrame:
    """The integer maths of every YUV -> RGB path, in NumPy (the oracle the CUDA kernel mirrors).

    The chroma terms (R, G, B offsets, rounding included) are computed once per 2x2 block and
    upsampled by repetition (cv2 nearest, exact at 2x), then added to the luma term, shifted, saturated.
    """
    half = 1 << (FIXED_POINT_SHIFT - 1)
    levels = np.arange(256, dtype=np.int32)
    luma_table = np.maximum(levels - coefficients.luma_offset, 0) * coefficients.luma
    centred = levels - 128
    u_centred, v_centred = np.take(centred, u), np.take(centred, v)
    chroma = np.empty((*u.shape, 3), dtype=np.int32)
    chroma[..., 0] = half + coefficients.v_to_red * v_centred
    chroma[..., 1] = half + coefficients.v_to_green * v_centred + coefficients.u_to_green * u_centred
    chroma[..., 2] = half + coefficients.u_to_blue * u_centred
    height, width = y.shape
    total = cv2.resize(chroma, (width, height), interpolation=cv2.INTER_NEAREST)
    total += np.take(luma_table, y)[..., None]
    np.right_shift(total, FIXED_POINT_SHIFT, out=total)
    np.clip(total, 0, 255, out=total)
    return total.astype(np.uint8)


def _packed_420(y: Plane, chroma_planes: tuple[Plane, ...]) -> Plane:
    """Y then chroma rows in one contiguous buffer: the layout cv2.cvtColor expects."""
    height, width = y.shape
    packed = np.empty((height * 3 // 2, width), dtype=np.uint8)
    packed[:height] = y
    chroma_rows = packed[height:].reshape(-1)
    offset = 0
    for plane in chroma_planes:
        chroma_rows[offset : offset + plane.size].reshape(plane.shape)[...] = plane
        offset += plane.size
    return packed


def i420_to_rgb_cpu(
    y: Plane, u: Plane, v: Plane, *, colorspace: Colorspace = "bt601", full_range: bool = False
) -> RgbFrame:
    """Planar 4:2:0 -> RGB on the CPU. BT.601 limited goes through OpenCV (same bits, faster)."""
    _check_planes(y, u, v)
    if colorspace == "bt601" and not full_range:
        return np.asarray(cv2.cvtColor(_packed_420(y, (u, v)), cv2.COLOR_YUV2RGB_I420), np.uint8)
    return yuv420_to_rgb_fixed_point(y, u, v, yuv_to_rgb_coefficients(colorspace, full_range))


def _split_nv12_chroma(uv: Any) -> tuple[Any, Any]:
    """U and V views of an interleaved chroma plane given as [H/2, W] or [H/2, W/2, 2]."""
    if uv.ndim == 3 and uv.shape[2] == 2:
        return uv[..., 0], uv[..., 1]
    if uv.ndim != 2 or uv.shape[1] % 2:
        raise InvalidFrameError(f"NV12 chroma plane must be [H/2, W] or [H/2, W/2, 2], got {uv.shape}")
    return uv[:, 0::2], uv[:, 1::2]


def nv12_to_rgb_cpu(
    y: Plane, uv: Plane, *, colorspace: Colorspace = "bt601", full_range: bool = False
) -> RgbFrame:
    """Semi-planar 4:2:0 (interleaved UV) -> RGB on the CPU, same maths as `i420_to_rgb_cpu`."""
    u, v = _split_nv12_chroma(uv)
    _check_planes(y, np.ascontiguousarray(u), np.ascontiguousarray(v))
    if colorspace == "bt601" and not full_range:
        uv_rows = np.ascontiguousarray(uv).reshape(y.shape[0] // 2, y.shape[1])
        return np.asarray(cv2.cvtColor(_packed_420(y, (uv_rows,)), cv2.COLOR_YUV2RGB_NV12), np.uint8)
    return yuv420_to_rgb_fixed_point(y, u, v, yuv_to_rgb_coefficients(colorspace, full_range))


def rgb_to_i420_cpu(
    rgb: RgbFrame, *, colorspace: Colorspace = "bt601", full_range: bool = False
) -> tuple[Plane, Plane, Plane]:
    """RGB -> planar 4:2:0 with each chroma sample from the average of its 2x2 block (exact integers)."""
    height, width = _check_rgb(rgb)
    coefficients = rgb_to_yuv_coefficients(colorspace, full_range)
    shift = FIXED_POINT_SHIFT
    if colorspace == "bt601" and not full_range:
        y = np.ascontiguousarray(
            cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420)[:height], dtype=np.uint8
        )  # same integer maths
    else:
        pixels = rgb.astype(np.int32)
        luma = (
            coefficients.red_to_luma * pixels[..., 0]
            + coefficients.green_to_luma * pixels[..., 1]
            + coefficients.blue_to_luma * pixels[..., 2]
            + ((coefficients.luma_offset << shift) + (1 << (shift - 1)))
        )
        y = np.clip(luma >> shift, 0, 255).astype(np.uint8)
    # 2x2 block sums, exactly: OpenCV's INTER_AREA halving of 16-bit samples is (a+b+c+d+2)>>2, the sum
    # itself for samples scaled by 4; 10x faster than a NumPy strided reduction, 2.5x the float32 halving
    quadrupled = rgb.astype(np.uint16)
    quadrupled <<= 2
    block_sums = cv2.resize(quadrupled, (width // 2, height // 2), interpolation=cv2.INTER_AREA).astype(np.int32)
    red, green, blue = block_sums[..., 0], block_sums[..., 1], block_sums[..., 2]
    rounding = (128 << (shift + 2)) + (1 << (shift + 1))  # sums of 4 samples: two more bits of shift
    u = (
        coefficients.red_to_u * red
        + coefficients.green_to_u * green
        + coefficients.blue_to_u * blue
        + rounding
    ) >> (shift + 2)
    v = (
        coefficients.red_to_v * red
        + coefficients.green_to_v * green
        + coefficients.blue_to_v * blue
        + rounding
    ) >> (shift + 2)
    return y, np.clip(u, 0, 255).astype(np.uint8), np.clip(v, 0, 255).astype(np.uint8)


_BLOCK_2D = (32, 8, 1)


def _grid_2d(width: int, height: int) -> tuple[int, int, int]:
    return ((width + _BLOCK_2D[0] - 1) // _BLOCK_2D[0], (height + _BLOCK_2D[1] - 1) // _BLOCK_2D[1], 1)


def _launch_yuv420_to_rgb(
    y: Any, u: Any, v: Any, chroma_step: int, colorspace: Colorspace, full_range: bool
) -> Any:
    cupy = require_cupy()
    height, width = y.shape
    coefficients = yuv_to_rgb_coefficients(colorspace, full_range)
    rgb = cupy.empty((height, width, 3), dtype=cupy.uint8)
    kernel = get_kernel("colorspace", "yuv420_to_rgb")
    integer_args = [
        np.int32(value)
        for value in (
            coefficients.luma,
            coefficients.v_to_red,
            coefficients.v_to_green,
            coefficients.u_to_green,
            coefficients.u_to_blue,
            coefficients.luma_offset,
        )
    ]
    kernel(
        _grid_2d(width, height),
        _BLOCK_2D,
        (
            y, np.int32(y.strides[0]), u, np.int32(u.strides[0]), v, np.int32(v.strides[0]),
            np.int32(chroma_step), rgb, np.int32(rgb.strides[0]), np.int32(width), np.int32(height),
            *integer_args,
        ),
    )  # fmt: skip
    return rgb


def i420_to_rgb_gpu(
    y: Any, u: Any, v: Any, *, colorspace: Colorspace = "bt601", full_range: bool = False
) -> Any:
    """Planar 4:2:0 CuPy planes (pitched views allowed) -> CuPy RGB frame; same bits as the CPU path."""
    _check_planes(y, u, v)
    return _launch_yuv420_to_rgb(y, u, v, 1, colorspace, full_range)


def nv12_to_rgb_gpu(y: Any, uv: Any, *, colorspace: Colorspace = "bt601", full_range: bool = False) -> Any:
    """Semi-planar 4:2:0 CuPy planes -> CuPy RGB frame; same bits as `nv12_to_rgb_cpu`."""
    u, v = _split_nv12_chroma(uv)
    height, width = y.shape
    if y.ndim != 2 or y.strides[1] != 1 or height % 2 or width % 2 or u.shape != (height // 2, width // 2):
        raise InvalidFrameError(f"NV12 planes do not form an even-sized frame: y {y.shape}, uv {uv.shape}")
    if u.strides[1] != 2:
        raise InvalidFrameError("NV12 chroma samples must be interleaved U, V bytes")
    return _launch_yuv420_to_rgb(y, u, v, 2, colorspace, full_range)


def rgb_to_i420_gpu(
    rgb: Any, *, colorspace: Colorspace = "bt601", full_range: bool = False
) -> tuple[Any, Any, Any]:
    """CuPy RGB frame -> planar 4:2:0 CuPy planes; same bits as `rgb_to_i420_cpu`."""
    cupy = require_cupy()
    height, width = _check_rgb(rgb)
    if rgb.strides[1] != 3 or rgb.strides[2] != 1:
        rgb = cupy.ascontiguousarray(rgb)
    coefficients = rgb_to_yuv_coefficients(colorspace, full_range)
    y = cupy.empty((height, width), dtype=cupy.uint8)
    u = cupy.empty((height // 2, width // 2), dtype=cupy.uint8)
    v = cupy.empty((height // 2, width // 2), dtype=cupy.uint8)
    kernel = get_kernel("colorspace", "rgb_to_yuv420")
    integer_args = [
        np.int32(value)
        for value in (
            coefficients.red_to_luma, coefficients.green_to_luma, coefficients.blue_to_luma,
            coefficients.red_to_u, coefficients.green_to_u, coefficients.blue_to_u,
            coefficients.red_to_v, coefficients.green_to_v, coefficients.blue_to_v,
            coefficients.luma_offset,
        )
    ]  # fmt: skip
    kernel(
        _grid_2d(width // 2, height // 2),
        _BLOCK_2D,
        (
            rgb, np.int32(rgb.strides[0]), y, np.int32(width), u, np.int32(width // 2), v, np.int32(width // 2),
            np.int32(width // 2), np.int32(height // 2), *integer_args,
        ),
    )  # fmt: skip
    return y, u, v


def i420_to_rgb(y: Any, u: Any, v: Any, *, colorspace: Colorspace = "bt601", full_range: bool = False) -> Any:
    """Planar 4:2:0 -> RGB frame on the device the planes live on (CuPy -> GPU kernel, NumPy -> CPU)."""
    if is_device_array(y):
        return i420_to_rgb_gpu(y, u, v, colorspace=colorspace, full_range=full_range)
    return i420_to_rgb_cpu(y, u, v, colorspace=colorspace, full_range=full_range)


def nv12_to_rgb(y: Any, uv: Any, *, colorspace: Colorspace = "bt601", full_range: bool = False) -> Any:
    """Semi-planar 4:2:0 -> RGB frame on the device the planes live on."""
    if is_device_array(y):
        return nv12_to_rgb_gpu(y, uv, colorspace=colorspace, full_range=full_range)
    return nv12_to_rgb_cpu(y, uv, colorspace=colorspace, full_range=full_range)


def rgb_to_i420(
    rgb: Any, *, colorspace: Colorspace = "bt601", full_range: bool = False
) -> tuple[Any, Any, Any]:
    """RGB frame -> planar 4:2:0 (2x2 chroma average) on the device the frame lives on."""
    if is_device_array(rgb):
        return rgb_to_i420_gpu(rgb, colorspace=colorspace, full_range=full_range)
    return rgb_to_i420_cpu(rgb, colorspace=colorspace, full_range=full_range)
