"""Skin colour model: fitted robustly on a sample; shaded skin and highlights stay skin; hair, grey
objects, other colours and dark patches do not; smooth side light is not mistaken for a dark patch."""

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.errors import InvalidFrameError
from gpu_ops.skin_model import SkinThresholds, fit_skin_model, fit_skin_model_cpu, score_skin_cpu

SKIN = np.array([205.0, 150.0, 120.0], np.float32)
SIZE = 120


def shaded_skin(seed: int, light: float = 0.0) -> NDArray[np.uint8]:
    """Skin with pores and JPEG-like noise, brighter towards the right by `light` (0 = evenly lit)."""
    rng = np.random.default_rng(seed)
    shade = 1.0 + light * (np.linspace(-1, 1, SIZE, dtype=np.float32)[None, :, None])
    image = SKIN * shade + rng.normal(0, 4, (SIZE, SIZE, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def centre_sample() -> NDArray[np.bool_]:
    sample = np.zeros((SIZE, SIZE), bool)
    sample[40:80, 40:80] = True
    return sample


def test_fit_ignores_a_strand_of_hair_inside_the_sample() -> None:
    image = shaded_skin(1)
    clean = fit_skin_model_cpu(image, centre_sample())
    image[40:80, 55:60] = (150, 70, 30)  # a red-brown strand across the sample
    fitted = fit_skin_model_cpu(image, centre_sample())
    np.testing.assert_allclose(fitted.chroma_mean, clean.chroma_mean, atol=0.004)
    assert fitted.inlier_fraction < 0.95
    assert abs(fitted.luma_median - clean.luma_median) < 3.0


def test_a_fit_started_on_the_cheeks_keeps_a_fringe_out_of_the_forehead() -> None:
    image = shaded_skin(5)
    clean = fit_skin_model_cpu(image, centre_sample())
    image[40:56, 40:80] = (150, 95, 45)  # a fringe over 40 % of the sample (the forehead part)
    cheeks = np.zeros((SIZE, SIZE), bool)
    cheeks[56:80, 40:80] = True
    started = fit_skin_model_cpu(image, centre_sample(), start=cheeks)
    np.testing.assert_allclose(started.chroma_mean, clean.chroma_mean, atol=0.008)  # the fringe's soft rim
    assert started.inlier_fraction < 0.7
    assert score_skin_cpu(image, started).chroma[44:52, 44:76].max() < 0.5
    swallowed = fit_skin_model_cpu(image, centre_sample())  # started on the whole sample: fringe is "skin"
    assert score_skin_cpu(image, swallowed).chroma[44:52, 44:76].min() > 0.95


def test_shaded_skin_and_highlights_stay_while_other_colours_go() -> None:
    image = shaded_skin(2)
    image[10:30, 10:40] = np.clip(SKIN * 0.6, 0, 255).astype(np.uint8)  # shadowed skin (2-D strip)
    highlight = (0.55 * SKIN + 0.45 * 255).astype(np.uint8)  # skin plus white light
    image[10:30, 80:110] = highlight
    image[90:110, 10:40] = (128, 130, 134)  # a grey microphone
    image[90:110, 50:70] = (60, 90, 170)  # a blue sleeve
    image[90:110, 80:110] = (160, 90, 40)  # red-brown hair: skin-like hue, far more saturated
    model = fit_skin_model_cpu(image, centre_sample())
    scores = score_skin_cpu(image, model, illumination_px=12.0)
    assert scores.chroma[14:26, 14:36].min() > 0.95 and scores.chroma[14:26, 84:106].min() > 0.95
    for rows, columns in (
        (slice(94, 106), slice(14, 36)),
        (slice(94, 106), slice(54, 66)),
        (slice(94, 106), slice(84, 106)),
    ):
        assert scores.chroma[rows, columns].max() < 0.05
    assert scores.luma[40:80, 40:80].min() > 0.99


def test_a_dark_band_is_dark_but_smooth_side_light_is_not() -> None:
    side_lit = shaded_skin(3, light=0.55)  # the left side at 45 % of the right's brightness
    model = fit_skin_model_cpu(side_lit, centre_sample())
    scores = score_skin_cpu(side_lit, model, illumination_px=12.0)
    assert scores.luma.min() > 0.95  # a smooth gradient: darker than the median, not than around it
    banded = side_lit.copy()
    cv2.line(banded, (70, 20), (110, 50), (38, 30, 26), 9)
    scores = score_skin_cpu(banded, fit_skin_model_cpu(banded, centre_sample()), illumination_px=12.0)
    band = np.zeros((SIZE, SIZE), np.uint8)
    cv2.line(band, (70, 20), (110, 50), 255, 3)
    assert scores.luma[band > 0].max() < 0.05
    assert scores.luma[60:100, 10:40].min() > 0.95


def test_thresholds_decide_and_bad_input_is_refused() -> None:
    image = shaded_skin(4)
    image[90:110, 80:110] = (175, 115, 75)  # a little more saturated than the skin
    model = fit_skin_model(image, centre_sample())
    strict = score_skin_cpu(image, model, SkinThresholds(chroma_distance=1.5, chroma_falloff=1.0))
    lenient = score_skin_cpu(image, model, SkinThresholds(chroma_distance=30.0))
    assert strict.chroma[95:105, 85:105].max() < 0.05 < lenient.chroma[95:105, 85:105].min()
    with pytest.raises(InvalidFrameError):
        fit_skin_model_cpu(image, np.zeros((SIZE, SIZE), bool))
    with pytest.raises(InvalidFrameError):
        fit_skin_model_cpu(image[..., 0], centre_sample())
