"""affine_crop: warp_crop == cv2.warpAffine, crop_faces == per-face cv2 crops normalised, kernel maths."""

import cv2
import numpy as np
import pytest

from gpu_ops.affine import estimate_similarity
from gpu_ops.affine_crop import crop_faces, crop_faces_cpu, opencv_inverse_matrices, warp_crop, warp_crop_cpu
from gpu_ops.backend import cupy_available
from gpu_ops.errors import InvalidFrameError

CUPY_OK, CUPY_REASON = cupy_available()
TEMPLATE_128 = np.array(
    [[46.2946, 51.6963], [81.5318, 51.5014], [64.0252, 71.7366], [49.5493, 92.3655], [78.7299, 92.2041]],
    dtype=np.float32,
)


def random_similarity(rng: np.random.Generator, frame_size: tuple[int, int]) -> np.ndarray:
    """A frame -> crop matrix for a random face somewhere in (or partly outside) the frame."""
    width, height = frame_size
    centre = rng.uniform([-40, -40], [width + 40, height + 40])
    face_scale = rng.uniform(0.3, 3.0)
    angle = rng.uniform(-0.6, 0.6)
    landmarks = (TEMPLATE_128 - 64.0) @ np.array(
        [[np.cos(angle), np.sin(angle)], [-np.sin(angle), np.cos(angle)]]
    ) * face_scale + centre
    return estimate_similarity(landmarks.astype(np.float32), TEMPLATE_128)


def fixed_point_warp_model(frame: np.ndarray, affine_matrix: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The integer maths of kernels/affine_crop.cu (locate_source + sample_replicate), in NumPy."""
    width, height = size
    m = opencv_inverse_matrices(affine_matrix)[0]
    xs, ys = np.arange(width, dtype=np.float64), np.arange(height, dtype=np.float64)
    fixed_x = (
        np.rint((m[1] * ys + m[2]) * 1024).astype(np.int64)[:, None]
        + 16
        + np.rint(m[0] * xs * 1024).astype(np.int64)
    ) >> 5
    fixed_y = (
        np.rint((m[4] * ys + m[5]) * 1024).astype(np.int64)[:, None]
        + 16
        + np.rint(m[3] * xs * 1024).astype(np.int64)
    ) >> 5
    column, row = np.clip(fixed_x >> 5, -32768, 32767), np.clip(fixed_y >> 5, -32768, 32767)
    x_frac, y_frac = fixed_x & 31, fixed_y & 31
    total = np.zeros((height, width, 3), dtype=np.int64)
    for dy, y_weight in ((0, 32 - y_frac), (1, y_frac)):
        for dx, x_weight in ((0, 32 - x_frac), (1, x_frac)):
            rows = np.clip(row + dy, 0, frame.shape[0] - 1)
            columns = np.clip(column + dx, 0, frame.shape[1] - 1)
            total += (x_weight * y_weight * 32)[..., None] * frame[rows, columns]
    return np.clip((total + (1 << 14)) >> 15, 0, 255).astype(np.uint8)


def test_warp_crop_equals_opencv_warp_affine() -> None:
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (480, 640, 3), dtype=np.uint8)
    for _ in range(5):
        matrix = random_similarity(rng, (640, 480))
        expected = cv2.warpAffine(
            frame, matrix, (128, 128), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        )
        np.testing.assert_array_equal(warp_crop(frame, matrix, (128, 128)), expected)


def test_kernel_fixed_point_model_equals_opencv_bit_for_bit() -> None:
    """The CUDA kernel's arithmetic, run in NumPy, reproduces cv2.warpAffine exactly (incl. borders)."""
    rng = np.random.default_rng(1)
    frame = rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)
    for size in [(128, 128), (112, 112), (192, 160)]:
        for _ in range(4):
            matrix = random_similarity(rng, (320, 240))
            np.testing.assert_array_equal(
                fixed_point_warp_model(frame, matrix, size), warp_crop_cpu(frame, matrix, size)
            )


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("swap_rb", [False, True])
def test_crop_faces_equals_per_face_opencv_normalised(layout: str, swap_rb: bool) -> None:
    rng = np.random.default_rng(2)
    frames = [rng.integers(0, 256, (360, 480, 3), dtype=np.uint8) for _ in range(3)]
    frame_index = np.array([0, 2, 2, 1, 0])
    matrices = np.stack([random_similarity(rng, (480, 360)) for _ in frame_index])
    mean, std, scale = (127.5, 120.0, 110.0), (127.5, 64.0, 32.0), 1.0
    batch = crop_faces(
        frames,
        frame_index,
        matrices,
        (112, 96),
        scale=scale,
        mean=mean,
        std=std,
        swap_rb=swap_rb,
        layout=layout,  # type: ignore[arg-type]
    )
    expected_shape = (5, 3, 96, 112) if layout == "nchw" else (5, 96, 112, 3)
    assert batch.shape == expected_shape and batch.dtype == np.float32
    for face, (source, matrix) in enumerate(zip(frame_index, matrices, strict=True)):
        crop = cv2.warpAffine(
            frames[source], matrix, (112, 96), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
        )
        if swap_rb:
            crop = cv2.cvtColor(crop, cv2.COLOR_RGB2BGR)
        expected = (crop.astype(np.float64) * scale - np.array(mean)) / np.array(std)
        got = batch[face].transpose(1, 2, 0) if layout == "nchw" else batch[face]
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_crop_faces_writes_into_preallocated_buffer() -> None:
    rng = np.random.default_rng(3)
    frame = rng.integers(0, 256, (200, 300, 3), dtype=np.uint8)
    matrices = np.stack([random_similarity(rng, (300, 200)) for _ in range(2)])
    out = np.full((2, 3, 64, 64), np.nan, dtype=np.float32)
    result = crop_faces_cpu([frame], np.zeros(2, dtype=np.int64), matrices, (64, 64), scale=1 / 255, out=out)
    assert result is out and np.isfinite(out).all()
    assert 0.0 <= out.min() and out.max() <= 1.0
    with pytest.raises(InvalidFrameError, match="C-contiguous float32"):
        crop_faces_cpu(
            [frame], np.zeros(2, dtype=np.int64), matrices, (64, 64), out=np.empty((2, 64, 64, 3), np.float32)
        )


def test_crop_faces_rejects_bad_batches() -> None:
    frame = np.zeros((32, 32, 3), dtype=np.uint8)
    matrix = np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32)
    with pytest.raises(InvalidFrameError, match="frame_index"):
        crop_faces_cpu([frame], np.array([1]), matrix[None], (16, 16))
    with pytest.raises(InvalidFrameError, match="affine_matrices"):
        crop_faces_cpu([frame], np.array([0, 0]), matrix[None], (16, 16))
    with pytest.raises(InvalidFrameError, match="layout"):
        crop_faces_cpu([frame], np.array([0]), matrix[None], (16, 16), layout="chw")  # type: ignore[arg-type]
    with pytest.raises(InvalidFrameError, match="uint8"):
        crop_faces_cpu([frame.astype(np.float32)], np.array([0]), matrix[None], (16, 16))  # type: ignore[list-item]
    assert crop_faces_cpu(
        [frame], np.zeros(0, np.int64), np.zeros((0, 2, 3), np.float32), (16, 16)
    ).shape == (0, 3, 16, 16)


@pytest.mark.gpu
@pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)
def test_affine_crop_parity() -> None:
    import cupy

    rng = np.random.default_rng(4)
    frames = [
        rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8),
        rng.integers(0, 256, (480, 640, 3), dtype=np.uint8),
    ]
    padded = cupy.zeros((720, 1300, 3), dtype=cupy.uint8)  # pitched frame: a view of a wider buffer
    padded[:, :1280] = cupy.asarray(frames[0])
    device_frames = [padded[:, :1280], cupy.asarray(frames[1])]
    frame_index = np.array([0, 1, 1, 0, 1, 0, 0, 1])
    matrices = np.stack([random_similarity(rng, (640, 480)) for _ in frame_index])
    np.testing.assert_array_equal(
        cupy.asnumpy(warp_crop(device_frames[0], matrices[0], (128, 128))),
        warp_crop_cpu(frames[0], matrices[0], (128, 128)),
    )  # exact
    for layout in ("nchw", "nhwc"):
        cpu = crop_faces_cpu(
            frames, frame_index, matrices, (128, 112), scale=1 / 255, mean=(0.5, 0.4, 0.3), std=(0.5, 0.25, 0.2),
            swap_rb=True, layout=layout,  # type: ignore[arg-type]
        )  # fmt: skip
        out = cupy.empty(cpu.shape, dtype=cupy.float32)
        gpu = crop_faces(
            device_frames, cupy.asarray(frame_index), cupy.asarray(matrices), (128, 112), scale=1 / 255,
            mean=(0.5, 0.4, 0.3), std=(0.5, 0.25, 0.2), swap_rb=True, layout=layout, out=out,  # type: ignore[arg-type]
        )  # fmt: skip
        assert gpu is out
        np.testing.assert_allclose(cupy.asnumpy(gpu), cpu, rtol=1e-6, atol=1e-6)
    unchecked = cupy.asarray(np.array([0, 5]))  # device indices are not read back: a bad one gives zeros
    zeros = crop_faces(device_frames, unchecked, cupy.asarray(matrices[:2]), (32, 32))
    assert float(cupy.abs(zeros[1]).max()) == 0.0 and float(cupy.abs(zeros[0]).max()) > 0.0
    with pytest.raises(InvalidFrameError, match="outside"):
        crop_faces(device_frames, np.array([0, 5]), matrices[:2], (32, 32))
