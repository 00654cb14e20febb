"""colorspace: OpenCV bit parity for BT.601 limited, float reference for BT.709/full, 2x2 chroma."""

import cv2
import numpy as np
import pytest

from gpu_ops.backend import cupy_available
from gpu_ops.colorspace import (
    _LUMA_RED_BLUE,
    FIXED_POINT_SHIFT,
    i420_to_rgb,
    i420_to_rgb_cpu,
    nv12_to_rgb_cpu,
    pad_to_even,
    rgb_to_i420,
    rgb_to_i420_cpu,
    rgb_to_yuv_coefficients,
    yuv420_to_rgb_fixed_point,
    yuv_to_rgb_coefficients,
)
from gpu_ops.errors import InvalidFrameError

CUPY_OK, CUPY_REASON = cupy_available()
needs_gpu = pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)


def padded_planes(rng: np.random.Generator, height: int, width: int) -> tuple[np.ndarray, ...]:
    """Random planes as strided views of larger buffers with odd row pitches, like av.VideoFrame."""
    y_buffer = rng.integers(0, 256, (height + 3, width + 37), dtype=np.uint8)
    u_buffer = rng.integers(0, 256, (height // 2 + 1, width // 2 + 13), dtype=np.uint8)
    v_buffer = rng.integers(0, 256, (height // 2 + 2, width // 2 + 7), dtype=np.uint8)
    return (
        y_buffer[1 : height + 1, 5 : width + 5],
        u_buffer[1:, 3 : width // 2 + 3],
        v_buffer[2:, : width // 2],
    )


def opencv_i420(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    height, width = y.shape
    packed = np.concatenate([y.ravel(), u.ravel(), v.ravel()]).reshape(height * 3 // 2, width)
    return cv2.cvtColor(packed, cv2.COLOR_YUV2RGB_I420)


def float_reference(
    y: np.ndarray, u: np.ndarray, v: np.ndarray, colorspace: str, full_range: bool
) -> np.ndarray:
    """The textbook matrix in float64 (Y clamped at 16 in limited range, as OpenCV and ours do)."""
    red, blue = _LUMA_RED_BLUE[colorspace]
    green = 1 - red - blue
    luma_gain, chroma_gain = (1.0, 1.0) if full_range else (255 / 219, 255 / 224)
    luma = np.maximum(y.astype(np.float64) - (0 if full_range else 16), 0) * luma_gain
    u_up = np.repeat(np.repeat(u.astype(np.float64) - 128, 2, 0), 2, 1) * chroma_gain
    v_up = np.repeat(np.repeat(v.astype(np.float64) - 128, 2, 0), 2, 1) * chroma_gain
    rgb = np.stack(
        [
            luma + 2 * (1 - red) * v_up,
            luma - 2 * (1 - red) * red / green * v_up - 2 * (1 - blue) * blue / green * u_up,
            luma + 2 * (1 - blue) * u_up,
        ],
        axis=-1,
    )
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def smooth_image(height: int, width: int) -> np.ndarray:
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    rgb = np.stack(
        [
            128 + 100 * np.sin(xx / 23.0) * np.cos(yy / 31.0),
            128 + 90 * np.cos(xx / 17.0 + yy / 29.0),
            128 + 110 * np.sin((xx + yy) / 41.0),
        ],
        axis=-1,
    )
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


@pytest.mark.parametrize(("height", "width"), [(48, 64), (480, 640), (2, 2), (34, 126)])
def test_i420_to_rgb_cpu_equals_opencv_on_padded_planes(height: int, width: int) -> None:
    y, u, v = padded_planes(np.random.default_rng(height * width), height, width)
    assert not y.flags.c_contiguous
    expected = opencv_i420(y, u, v)
    np.testing.assert_array_equal(i420_to_rgb_cpu(y, u, v), expected)
    np.testing.assert_array_equal(i420_to_rgb(y, u, v), expected)


def test_fixed_point_mirror_equals_opencv_bit_for_bit() -> None:
    """The integer maths the CUDA kernel runs, checked against OpenCV on every Y, U, V value."""
    y, u, v = padded_planes(np.random.default_rng(1), 256, 512)
    y[:, :256] = np.arange(256, dtype=np.uint8)[None, :]
    mirrored = yuv420_to_rgb_fixed_point(y, u, v, yuv_to_rgb_coefficients("bt601", False))
    np.testing.assert_array_equal(mirrored, opencv_i420(y, u, v))


def test_nv12_to_rgb_cpu_equals_opencv_and_i420() -> None:
    y, u, v = padded_planes(np.random.default_rng(2), 64, 96)
    uv = np.stack([u, v], axis=-1)
    expected = i420_to_rgb_cpu(y, u, v)
    np.testing.assert_array_equal(nv12_to_rgb_cpu(y, uv), expected)
    np.testing.assert_array_equal(nv12_to_rgb_cpu(y, uv.reshape(32, 96)), expected)
    np.testing.assert_array_equal(
        nv12_to_rgb_cpu(y, uv, colorspace="bt709"), i420_to_rgb_cpu(y, u, v, colorspace="bt709")
    )


@pytest.mark.parametrize(("colorspace", "full_range"), [("bt709", False), ("bt709", True), ("bt601", True)])
def test_i420_to_rgb_other_matrices_within_one_level_of_float(colorspace: str, full_range: bool) -> None:
    y, u, v = padded_planes(np.random.default_rng(3), 120, 160)
    result = i420_to_rgb_cpu(y, u, v, colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    reference = float_reference(y, u, v, colorspace, full_range)
    assert np.abs(result.astype(int) - reference).max() <= 1
    assert not np.array_equal(result, opencv_i420(y, u, v))  # the matrix really changed


def test_i420_to_rgb_rejects_odd_and_mismatched_planes() -> None:
    with pytest.raises(InvalidFrameError, match="even"):
        i420_to_rgb_cpu(np.zeros((5, 8), np.uint8), np.zeros((2, 4), np.uint8), np.zeros((2, 4), np.uint8))
    with pytest.raises(InvalidFrameError, match="chroma"):
        i420_to_rgb_cpu(np.zeros((8, 8), np.uint8), np.zeros((4, 3), np.uint8), np.zeros((4, 4), np.uint8))
    with pytest.raises(InvalidFrameError, match="colorspace"):
        i420_to_rgb_cpu(
            np.zeros((8, 8), np.uint8),
            np.zeros((4, 4), np.uint8),
            np.zeros((4, 4), np.uint8),
            colorspace="bt2020",  # type: ignore[arg-type]
        )
    with pytest.raises(InvalidFrameError, match="pad_to_even"):
        rgb_to_i420_cpu(np.zeros((7, 8, 3), np.uint8))


def test_pad_to_even_repeats_last_row_and_column() -> None:
    frame = np.random.default_rng(4).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    padded = pad_to_even(frame)
    assert padded.shape == (6, 8, 3)
    np.testing.assert_array_equal(padded[:5, :7], frame)
    np.testing.assert_array_equal(padded[5, :7], frame[4])
    np.testing.assert_array_equal(padded[:5, 7], frame[:, 6])
    even = frame[:4, :6]
    assert pad_to_even(even) is even


def test_rgb_to_i420_luma_equals_opencv_and_chroma_is_block_average() -> None:
    rgb = np.random.default_rng(5).integers(0, 256, (64, 80, 3), dtype=np.uint8)
    y, u, v = rgb_to_i420_cpu(rgb)
    opencv = cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420)
    np.testing.assert_array_equal(y, opencv[:64])
    block_mean = rgb.reshape(32, 2, 40, 2, 3).mean(axis=(1, 3))
    expected_u = 128 + (-0.148 * block_mean[..., 0] - 0.291 * block_mean[..., 1] + 0.439 * block_mean[..., 2])
    expected_v = 128 + (0.439 * block_mean[..., 0] - 0.368 * block_mean[..., 1] - 0.071 * block_mean[..., 2])
    assert np.abs(u - expected_u).max() <= 0.51
    assert np.abs(v - expected_v).max() <= 0.51
    assert (u.shape, v.shape) == ((32, 40), (32, 40))


@pytest.mark.parametrize(("colorspace", "full_range"), [("bt601", False), ("bt709", False), ("bt709", True)])
def test_rgb_to_i420_chroma_is_the_fixed_point_formula_on_exact_block_sums(
    colorspace: str, full_range: bool
) -> None:
    """Bit for bit what the device kernel computes: each chroma sample from its 2x2 block's exact sum
    (a rounded block mean would be off by up to a level on some samples), saturated blocks included."""
    rng = np.random.default_rng(11)
    rgb = rng.integers(0, 256, (96, 130, 3), dtype=np.uint8)
    rgb[:8] = 255
    rgb[8:16] = 0
    rgb[16:24, :, 0] = 255
    _, u, v = rgb_to_i420_cpu(rgb, colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    sums = rgb.astype(np.int64).reshape(48, 2, 65, 2, 3).sum(axis=(1, 3))
    c = rgb_to_yuv_coefficients(colorspace, full_range)  # type: ignore[arg-type]
    shift = FIXED_POINT_SHIFT + 2
    rounding = (128 << shift) + (1 << (shift - 1))
    red, green, blue = sums[..., 0], sums[..., 1], sums[..., 2]
    expected_u = (c.red_to_u * red + c.green_to_u * green + c.blue_to_u * blue + rounding) >> shift
    expected_v = (c.red_to_v * red + c.green_to_v * green + c.blue_to_v * blue + rounding) >> shift
    np.testing.assert_array_equal(u, np.clip(expected_u, 0, 255))
    np.testing.assert_array_equal(v, np.clip(expected_v, 0, 255))


@pytest.mark.parametrize(("colorspace", "full_range"), [("bt709", False), ("bt709", True), ("bt601", True)])
def test_rgb_to_i420_generic_path_matches_float_matrix(colorspace: str, full_range: bool) -> None:
    rgb = np.random.default_rng(6).integers(0, 256, (32, 48, 3), dtype=np.uint8)
    y, _, _ = rgb_to_i420_cpu(rgb, colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    coefficients = rgb_to_yuv_coefficients(colorspace, full_range)  # type: ignore[arg-type]
    red, blue = _LUMA_RED_BLUE[colorspace]
    gain = 1.0 if full_range else 219 / 255
    expected = coefficients.luma_offset + gain * (
        red * rgb[..., 0] + (1 - red - blue) * rgb[..., 1] + blue * rgb[..., 2]
    )
    assert np.abs(y - expected).max() <= 0.51


@pytest.mark.parametrize(("colorspace", "full_range"), [("bt601", False), ("bt709", False), ("bt709", True)])
def test_round_trip_is_close_on_smooth_images(colorspace: str, full_range: bool) -> None:
    rgb = smooth_image(240, 320)
    planes = rgb_to_i420(rgb, colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    back = i420_to_rgb(*planes, colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    error = np.abs(back.astype(int) - rgb)
    assert error.mean() < 1.5
    assert error.max() <= 8


def test_block_average_round_trips_better_than_opencv_top_left_chroma() -> None:
    def round_trip_errors(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ours = i420_to_rgb_cpu(*rgb_to_i420_cpu(rgb))
        opencv = cv2.cvtColor(cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420), cv2.COLOR_YUV2RGB_I420)
        return ours.astype(float) - rgb, opencv.astype(float) - rgb

    ours, opencv = round_trip_errors(smooth_image(240, 320))
    assert np.abs(ours).mean() < 0.8 * np.abs(opencv).mean()
    lined = smooth_image(240, 320)
    lined[101:140:2, :, :] = (250, 20, 20)  # red lines on odd rows: chroma detail finer than a 2x2 block
    ours, opencv = round_trip_errors(lined)
    assert np.sqrt((ours**2).mean()) < 0.8 * np.sqrt((opencv**2).mean())


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize(("colorspace", "full_range"), [("bt601", False), ("bt709", False), ("bt709", True)])
def test_colorspace_parity(colorspace: str, full_range: bool) -> None:
    import cupy

    from gpu_ops.colorspace import nv12_to_rgb

    rng = np.random.default_rng(7)
    y, u, v = padded_planes(rng, 480, 640)
    y_buffer = cupy.asarray(np.ascontiguousarray(y.base if y.base is not None else y))
    device_y = y_buffer[1:481, 5:645]  # same padded layout on the device
    device_u, device_v = cupy.asarray(u), cupy.asarray(v)
    expected = i420_to_rgb_cpu(y, u, v, colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    result = i420_to_rgb(device_y, device_u, device_v, colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    np.testing.assert_array_equal(cupy.asnumpy(result), expected)  # integer maths: exact
    uv = cupy.asarray(np.stack([u, v], axis=-1))
    nv12 = nv12_to_rgb(device_y, uv, colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    np.testing.assert_array_equal(cupy.asnumpy(nv12), expected)
    rgb = rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
    cpu_planes = rgb_to_i420_cpu(rgb, colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    gpu_planes = rgb_to_i420(cupy.asarray(rgb), colorspace=colorspace, full_range=full_range)  # type: ignore[arg-type]
    for cpu_plane, gpu_plane in zip(cpu_planes, gpu_planes, strict=True):
        np.testing.assert_array_equal(cupy.asnumpy(gpu_plane), cpu_plane)
