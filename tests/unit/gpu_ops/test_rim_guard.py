"""Rim guard: in the outline zone the target's dark surroundings are kept, its lit skin is not touched."""

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.backend import cupy_available
from gpu_ops.errors import InvalidFrameError
from gpu_ops.rim_guard import SMOOTHING_SIGMA, rim_guard, rim_guard_generic, smoothed_generic

CUPY_OK, CUPY_REASON = cupy_available()
HEIGHT, WIDTH = 120, 100
LIMITS = (0.5, 0.75)


def scene() -> tuple[NDArray[np.uint8], NDArray[np.float32], NDArray[np.float32]]:
    """A lit face (180) filling the box, with a zone 1 on its left 20 columns falling to 0 at column 30;
    in the zone: a dark strip (background past the jaw) and a highlight; inside: a dark blob (a beard)."""
    region = np.full((HEIGHT, WIDTH, 3), 180, np.uint8)
    region[20:60, 0:12] = 40  # dark, in the zone
    region[70:100, 0:12] = 250  # brighter than the face, in the zone
    region[50:80, 50:80] = 40  # dark, inside
    zone = np.zeros((HEIGHT, WIDTH), np.float32)
    zone[:, :20] = 1.0
    zone[:, 20:30] = np.linspace(1.0, 0.0, 10, endpoint=False, dtype=np.float32)
    return region, np.ones((HEIGHT, WIDTH), np.float32), zone


def test_dark_pixels_in_the_zone_are_kept_and_everything_else_is_pasted() -> None:
    region, alpha, zone = scene()
    factor = rim_guard(region, alpha, zone, LIMITS)
    assert factor.dtype == np.float32 and factor.shape == (HEIGHT, WIDTH)
    assert factor[25:55, 0:8].max() == 0.0  # background past the jaw: the target's own
    assert factor[75:95, 0:8].min() == 1.0  # a highlight is brighter, not darker: pasted
    assert factor[55:75, 55:75].min() == 1.0  # a dark beard inside the face: not the guard's business
    assert factor[:, 30:].min() == 1.0  # off the zone nothing changes


def test_the_zone_scales_the_guard_and_the_face_sets_the_reference() -> None:
    region, alpha, _ = scene()
    half = np.full((HEIGHT, WIDTH), 0.5, np.float32)
    assert float(rim_guard(region, alpha, half, LIMITS)[30:50, 2:6].max()) == pytest.approx(0.5)
    # a darker face (skin 90, the dark strip 20, all halved) is judged against itself: the same guard
    darker = (region // 2).astype(np.uint8)
    _, _, zone = scene()
    np.testing.assert_allclose(
        rim_guard(darker, alpha, zone, LIMITS), rim_guard(region, alpha, zone, LIMITS), atol=0.02
    )


def test_a_face_with_no_interior_is_not_guarded() -> None:
    region, _, zone = scene()
    alpha = np.zeros((HEIGHT, WIDTH), np.float32)
    assert rim_guard(region, alpha, np.ones_like(zone), LIMITS).min() == 1.0
    tiny = rim_guard(region[:4, :4], np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), LIMITS)
    assert tiny.shape == (4, 4) and tiny.min() == 1.0  # all zone, no interior


def test_the_device_blur_is_opencvs() -> None:
    plane = np.random.default_rng(0).uniform(0, 255, (37, 53)).astype(np.float32)
    expected = cv2.GaussianBlur(plane, (0, 0), SMOOTHING_SIGMA, borderType=cv2.BORDER_REFLECT_101)
    np.testing.assert_allclose(smoothed_generic(np, plane), expected, atol=1e-3)


@pytest.mark.parametrize("size", [(120, 100), (9, 40), (5, 5)])
def test_the_device_formula_is_the_host_path(size: tuple[int, int]) -> None:
    """`rim_guard_generic` (what CuPy runs) against the OpenCV path, on NumPy, incl. boxes too small to blur."""
    rng = np.random.default_rng(7)
    region = rng.integers(0, 256, (*size, 3)).astype(np.uint8)
    alpha = rng.uniform(0, 1, size).astype(np.float32)
    zone = rng.uniform(0, 1, size).astype(np.float32)
    np.testing.assert_allclose(
        rim_guard_generic(region, alpha, zone, LIMITS), rim_guard(region, alpha, zone, LIMITS), atol=1e-4
    )


def test_bad_input_is_refused() -> None:
    region, alpha, zone = scene()
    with pytest.raises(InvalidFrameError):
        rim_guard(region[..., 0], alpha, zone, LIMITS)
    with pytest.raises(InvalidFrameError):
        rim_guard(region, alpha[:-1], zone, LIMITS)
    with pytest.raises(ValueError, match="dark_limits"):
        rim_guard(region, alpha, zone, (0.8, 0.5))


@pytest.mark.gpu
@pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)
def test_the_device_guard_matches_the_host() -> None:
    import cupy

    region, alpha, zone = scene()
    expected = rim_guard(region, alpha, zone, LIMITS)
    on_device = rim_guard(cupy.asarray(region), cupy.asarray(alpha), cupy.asarray(zone), LIMITS)
    assert isinstance(on_device, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(on_device), expected, atol=1e-4)
