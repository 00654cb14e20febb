"""affine: the closed-form Umeyama similarity against OpenCV, inverse and point mapping."""

import cv2
import numpy as np
import pytest

from gpu_ops.affine import estimate_similarity, invert_affine, transform_points
from gpu_ops.backend import cupy_available
from gpu_ops.errors import InvalidFrameError

CUPY_OK, CUPY_REASON = cupy_available()
ARCFACE_TEMPLATE = np.array(
    [[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655], [70.7299, 92.2041]],
    dtype=np.float32,
)


def similarity(angle: float, scale: float, shift: tuple[float, float]) -> np.ndarray:
    cos, sin = scale * np.cos(angle), scale * np.sin(angle)
    return np.array([[cos, -sin, shift[0]], [sin, cos, shift[1]]], dtype=np.float64)


def test_recovers_exact_similarity_and_matches_opencv() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        truth = similarity(
            rng.uniform(-np.pi, np.pi), rng.uniform(0.2, 4.0), tuple(rng.uniform(-300, 300, 2))
        )
        src = rng.uniform(0, 640, (5, 2))
        dst = src @ truth[:, :2].T + truth[:, 2]
        estimated = estimate_similarity(src.astype(np.float32), dst.astype(np.float32))
        assert estimated.dtype == np.float32 and estimated.shape == (2, 3)
        opencv, inliers = cv2.estimateAffinePartial2D(src, dst, method=cv2.LMEDS)
        assert inliers.all()
        np.testing.assert_allclose(estimated, opencv, rtol=1e-4, atol=2e-3)
        np.testing.assert_allclose(estimated, truth, rtol=1e-4, atol=2e-3)


def test_least_squares_fit_beats_any_perturbed_matrix_on_noisy_points() -> None:
    rng = np.random.default_rng(1)
    landmarks = (
        ARCFACE_TEMPLATE * 2.3
        + np.array([200, 120], dtype=np.float32)
        + rng.normal(0, 2.0, (5, 2)).astype(np.float32)
    )
    matrix = estimate_similarity(landmarks, ARCFACE_TEMPLATE).astype(np.float64)

    def residual(candidate: np.ndarray) -> float:
        return float(((landmarks @ candidate[:, :2].T + candidate[:, 2] - ARCFACE_TEMPLATE) ** 2).sum())

    best = residual(matrix)
    for _ in range(50):
        step = rng.normal(0, 1e-3, 4)
        a, b = matrix[0, 0] + step[0], matrix[1, 0] + step[1]
        perturbed = np.array([[a, -b, matrix[0, 2] + step[2]], [b, a, matrix[1, 2] + step[3]]])
        assert residual(perturbed) >= best - 1e-6


def test_batched_estimate_equals_per_face_estimates_with_shared_template() -> None:
    rng = np.random.default_rng(2)
    faces = rng.uniform(0, 480, (4, 5, 2)).astype(np.float32)
    batched = estimate_similarity(faces, ARCFACE_TEMPLATE)
    assert batched.shape == (4, 2, 3)
    for face, matrix in zip(faces, batched, strict=True):
        np.testing.assert_allclose(matrix, estimate_similarity(face, ARCFACE_TEMPLATE), rtol=1e-6, atol=1e-5)


def test_invert_affine_matches_opencv_and_round_trips_points() -> None:
    rng = np.random.default_rng(3)
    matrix = np.array([[1.3, 0.4, -20.0], [-0.2, 0.9, 35.0]], dtype=np.float32)
    inverse = invert_affine(matrix)
    np.testing.assert_allclose(inverse, cv2.invertAffineTransform(matrix), rtol=1e-5, atol=1e-4)
    points = rng.uniform(-100, 700, (7, 2)).astype(np.float32)
    np.testing.assert_allclose(transform_points(transform_points(points, matrix), inverse), points, atol=1e-3)
    batch = np.stack([matrix, matrix * np.float32(2.0)])
    np.testing.assert_allclose(invert_affine(batch)[0], inverse, rtol=1e-6)


def test_transform_points_equals_opencv_transform() -> None:
    rng = np.random.default_rng(4)
    matrix = similarity(0.3, 1.7, (5.0, -9.0)).astype(np.float32)
    points = rng.uniform(0, 100, (3, 5, 2)).astype(np.float32)
    expected = cv2.transform(points.reshape(-1, 1, 2), matrix).reshape(3, 5, 2)
    np.testing.assert_allclose(transform_points(points, matrix), expected, rtol=1e-5, atol=1e-3)
    per_face = np.stack([matrix, matrix, invert_affine(matrix)])
    mapped = transform_points(points, per_face)
    np.testing.assert_allclose(mapped[2], transform_points(points[2], invert_affine(matrix)), atol=1e-4)


def test_degenerate_inputs_raise() -> None:
    with pytest.raises(InvalidFrameError, match="same point"):
        estimate_similarity(np.ones((5, 2), np.float32), ARCFACE_TEMPLATE)
    with pytest.raises(InvalidFrameError, match="pair"):
        estimate_similarity(np.zeros((4, 2), np.float32), ARCFACE_TEMPLATE)
    with pytest.raises(InvalidFrameError, match="singular"):
        invert_affine(np.zeros((2, 3), np.float32))


@pytest.mark.gpu
@pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)
def test_affine_parity() -> None:
    import cupy

    rng = np.random.default_rng(5)
    faces = rng.uniform(0, 480, (3, 5, 2)).astype(np.float32)
    cpu = estimate_similarity(faces, ARCFACE_TEMPLATE)
    gpu = estimate_similarity(cupy.asarray(faces), cupy.asarray(ARCFACE_TEMPLATE))
    np.testing.assert_allclose(cupy.asnumpy(gpu), cpu, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(cupy.asnumpy(invert_affine(gpu)), invert_affine(cpu), rtol=1e-5, atol=1e-4)
    mapped = transform_points(cupy.asarray(faces), gpu)
    np.testing.assert_allclose(cupy.asnumpy(mapped), transform_points(faces, cpu), atol=1e-3)
