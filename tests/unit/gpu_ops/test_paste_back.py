"""paste_back: box-limited blend == classic full-frame two-warpAffine blend (bit for bit); outside untouched."""

import cv2
import numpy as np
import pytest

from gpu_ops.affine import estimate_similarity
from gpu_ops.backend import cupy_available
from gpu_ops.errors import InvalidFrameError
from gpu_ops.paste_back import face_box, paste_back, paste_back_cpu

CUPY_OK, CUPY_REASON = cupy_available()
TEMPLATE_128 = np.array(
    [[46.2946, 51.6963], [81.5318, 51.5014], [64.0252, 71.7366], [49.5493, 92.3655], [78.7299, 92.2041]],
    dtype=np.float32,
)


def feathered_mask(size: int) -> np.ndarray:
    """A soft ellipse in crop space, as the swap engines build once per source."""
    mask = np.zeros((size, size), dtype=np.float32)
    cv2.ellipse(mask, (size // 2, size // 2), (size * 3 // 8, size * 7 // 16), 0, 0, 360, 1.0, -1)
    return cv2.GaussianBlur(mask, (0, 0), size / 24)


def face_matrix(centre: tuple[float, float], face_scale: float, angle: float, crop_size: int) -> np.ndarray:
    rotation = np.array([[np.cos(angle), np.sin(angle)], [-np.sin(angle), np.cos(angle)]])
    landmarks = (TEMPLATE_128 - 64.0) @ rotation * face_scale + np.array(centre)
    return estimate_similarity(landmarks.astype(np.float32), TEMPLATE_128 * (crop_size / 128.0))


def classic_paste(frame: np.ndarray, crop: np.ndarray, matrix: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """insightface's paste: invert, warp crop and mask over the whole frame, blend (rounded)."""
    inverse = cv2.invertAffineTransform(matrix)
    size = (frame.shape[1], frame.shape[0])
    warped_crop = cv2.warpAffine(crop, inverse, size, borderValue=0.0).astype(np.float32)
    warped_mask = cv2.warpAffine(mask, inverse, size, borderValue=0.0)[..., None]
    blended = warped_mask * warped_crop + (1 - warped_mask) * frame.astype(np.float32)
    return np.clip(np.rint(blended), 0, 255).astype(np.uint8)


CASES = [
    ((640, 480), 128, (320.0, 240.0), 1.3, 0.2),
    ((640, 480), 256, (100.0, 400.0), 2.0, -0.5),
    ((1280, 720), 128, (1250.0, 30.0), 1.7, 0.9),  # partly outside the frame
    ((1280, 720), 256, (640.0, 360.0), 0.6, 3.0),  # upside down, crop larger than the face
]


@pytest.mark.parametrize(("frame_size", "crop_size", "centre", "face_scale", "angle"), CASES)
def test_paste_back_matches_classic_blend_and_leaves_outside_untouched(
    frame_size: tuple[int, int], crop_size: int, centre: tuple[float, float], face_scale: float, angle: float
) -> None:
    rng = np.random.default_rng(crop_size + frame_size[0])
    frame = rng.integers(0, 256, (frame_size[1], frame_size[0], 3), dtype=np.uint8)
    crop = rng.integers(0, 256, (crop_size, crop_size, 3), dtype=np.uint8)  # white noise: worst case
    mask = feathered_mask(crop_size)
    matrix = face_matrix(centre, face_scale, angle, crop_size)
    expected = classic_paste(frame, crop, matrix, mask)
    result = frame.copy()
    x1, y1, x2, y2 = paste_back(result, crop, matrix, mask)
    assert 0 <= x1 < x2 <= frame_size[0] and 0 <= y1 < y2 <= frame_size[1]
    np.testing.assert_array_equal(result, expected)  # same 1/32-px positions: exact, not just within 1 level
    outside = np.ones(frame.shape[:2], dtype=bool)
    outside[y1:y2, x1:x2] = False
    np.testing.assert_array_equal(result[outside], frame[outside])  # bit-identical outside the box
    changed = np.argwhere((expected != frame).any(axis=-1))
    assert changed.size and (changed.min(axis=0) >= (y1, x1)).all() and (changed.max(axis=0) < (y2, x2)).all()


def test_full_mask_pastes_the_crop_itself_inside_the_face() -> None:
    frame = np.zeros((240, 320, 3), dtype=np.uint8)
    crop = np.full((128, 128, 3), (200, 100, 50), dtype=np.uint8)
    matrix = face_matrix((160.0, 120.0), 1.0, 0.0, 128)
    paste_back_cpu(frame, crop, matrix, np.ones((128, 128), dtype=np.float32))
    np.testing.assert_array_equal(frame[120, 160], (200, 100, 50))
    np.testing.assert_array_equal(frame[0, 0], (0, 0, 0))


def test_box_is_empty_when_face_is_outside_the_frame() -> None:
    matrix = face_matrix((5000.0, 5000.0), 1.0, 0.0, 128)
    x1, y1, x2, y2 = face_box(matrix, (128, 128), (640, 480))
    assert x2 == x1 or y2 == y1
    frame = np.random.default_rng(9).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    before = frame.copy()
    paste_back_cpu(frame, np.zeros((128, 128, 3), np.uint8), matrix, np.ones((128, 128), np.float32))
    np.testing.assert_array_equal(frame, before)


def test_paste_back_rejects_mismatched_mask() -> None:
    frame = np.zeros((64, 64, 3), dtype=np.uint8)
    with pytest.raises(InvalidFrameError, match="crop_mask"):
        paste_back_cpu(
            frame,
            np.zeros((32, 32, 3), np.uint8),
            np.eye(2, 3, dtype=np.float32),
            np.ones((16, 16), np.float32),
        )


@pytest.mark.gpu
@pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)
@pytest.mark.parametrize(("frame_size", "crop_size", "centre", "face_scale", "angle"), CASES)
def test_paste_back_parity(
    frame_size: tuple[int, int], crop_size: int, centre: tuple[float, float], face_scale: float, angle: float
) -> None:
    import cupy

    rng = np.random.default_rng(crop_size)
    frame = rng.integers(0, 256, (frame_size[1], frame_size[0], 3), dtype=np.uint8)
    crop = rng.integers(0, 256, (crop_size, crop_size, 3), dtype=np.uint8)
    mask = feathered_mask(crop_size)
    matrix = face_matrix(centre, face_scale, angle, crop_size)
    cpu_frame = frame.copy()
    cpu_box = paste_back_cpu(cpu_frame, crop, matrix, mask)
    device_frame = cupy.asarray(frame)
    gpu_box = paste_back(device_frame, cupy.asarray(crop), matrix, cupy.asarray(mask))
    assert gpu_box == cpu_box
    assert np.abs(cupy.asnumpy(device_frame).astype(int) - cpu_frame).max() <= 1
