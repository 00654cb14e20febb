"""A face's own skin colour, fitted once per source photo, and how skin-like each pixel of it is.

Why a model of the face's own skin and not a fixed skin range: people differ far more from each other
than one face's skin differs from its own hair, stubble or shadow; a fixed range would keep blond
hair on a pale face and cut a dark face apart.

Colour is judged in normalised chromaticity (r, g) = (R, G) / (R + G + B): a shadow scales R, G and B
alike and leaves (r, g) where it was, so a shaded cheek is still skin while hair (more saturated),
a grey microphone or a blue sleeve (elsewhere) are not. Two physical exceptions are allowed for:
- a highlight is skin plus white light: a pixel brighter than the skin's median may lie towards
  neutral grey by as much as it is brighter (`specular_allowance`);
- shadowed skin is redder (light scattered under the skin) and dark chromaticity is noisy: the
  distance counts for less the darker the pixel is (`dark_chroma_room`).
Brightness is judged apart (`luma` score): a pixel that is both far darker than the skin's median and
far darker than the skin around it (a weighted blur of the face's bright skin, `illumination_px`) is
dark hair, a dark object in front of the face or a cast shadow, whatever its hue. Smooth shading (a
side-lit face's darker half) is darker than the median but not than its surroundings: it stays skin
and the engine's shading transfer relights it.

The model is fitted on a sample (the caller's: the central cheeks and forehead) robustly: the
chromaticity mean and covariance are refitted on the pixels within 3 sigmas a few times, so a strand
of hair or a shadow inside the sample does not widen the model. Built once per source on the host,
like the other texture-space masks (gpu_ops/masks.py); device input is copied back.
"""

import logging
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import to_host
from gpu_ops.errors import InvalidFrameError
from gpu_ops.masks import Mask, smoothstep

logger = logging.getLogger(__name__)

LUMA_WEIGHTS = np.array([0.299, 0.587, 0.114], np.float32)  # BT.601
_CHROMA_AND_LUMA = np.array([[1, 0, 0, 1], [0, 1, 0, 1], [1, 1, 1, 3], [*LUMA_WEIGHTS, 0]], np.float32)
_NEUTRAL = np.array([1.0 / 3.0, 1.0 / 3.0], np.float32)
_TRIM_SIGMAS = 3.0
_TRIM_ROUNDS = 5
_TRIMMED_VARIANCE = 0.87  # a 2-D Gaussian cut at 3 sigma keeps this share of its variance
_MIN_SAMPLE_LUMA = 25.0  # darker sample pixels have no usable chromaticity


@dataclass(frozen=True)
class SkinThresholds:
    """How far from the fitted skin a pixel may be and still count as skin."""

    chroma_distance: float = 3.5  # Mahalanobis distance where the chroma score starts to fall...
    chroma_falloff: float = 2.0  # ...reaching 0 this much further
    min_chroma_spread: tuple[float, float] = (0.016, 0.008)  # r, g: JPEG and sensor noise of a tight fit
    specular_allowance: float = 1.2  # towards neutral, per unit of brightness above the skin's median
    dark_chroma_room: float = 1.0  # distance divided by 1 + this x darkness
    dark_luma: tuple[float, float] = (0.4, 0.55)  # of the median skin luma: dark below the first...
    dark_local: tuple[float, float] = (
        0.45,
        0.65,
    )  # ...and of the surrounding skin's: luma score 0 below both
    blur_px: float = 1.5  # the image is smoothed first: pores and JPEG blocks are not occluders


@dataclass(frozen=True)
class SkinColourModel:
    """The skin of one face: chromaticity mean and covariance, and the median brightness."""

    chroma_mean: NDArray[np.float32]  # [2] (r, g)
    chroma_covariance: NDArray[np.float32]  # [2, 2], at least min_chroma_spread squared on the diagonal
    luma_median: float
    inlier_fraction: float  # of the sample: how much of it the trimmed fit kept


@dataclass(frozen=True)
class SkinScores:
    """Per pixel, 1 = skin-like and 0 = not, for colour and for brightness separately (float32 H x W)."""

    chroma: Mask
    luma: Mask
    towards_neutral: Mask  # how far the chromaticity lies from the skin's towards grey (0 skin, 1 grey)


def _chromaticity_and_luma(
    image: NDArray[np.uint8], blur_px: float
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise InvalidFrameError(
            f"skin model needs an H x W x 3 uint8 RGB image, got {image.shape} {image.dtype}"
        )
    pixels = image.astype(np.float32)
    if blur_px > 0:
        pixels = np.asarray(cv2.GaussianBlur(pixels, (0, 0), blur_px), np.float32)
    # r + 1, g + 1, their sum + 3 and the luma in one OpenCV pass (a third faster than NumPy's axis sums);
    # +1 per channel: black is neutral, not undefined
    planes = np.asarray(cv2.transform(pixels, _CHROMA_AND_LUMA), np.float32)
    chromaticity = planes[..., :2] / planes[..., 2:3]
    return chromaticity.astype(np.float32), np.ascontiguousarray(planes[..., 3])


def fit_skin_model_cpu(
    image: NDArray[np.uint8],
    sample: NDArray[np.bool_],
    thresholds: SkinThresholds | None = None,
    start: NDArray[np.bool_] | None = None,
) -> SkinColourModel:
    """The skin colour of `image` fitted on the `sample` pixels (robust: see module docstring). With
    `start` (a part of the sample where skin is surest, the cheeks) the fit starts from there, so the
    rest of the sample (a forehead half under a fringe) joins only where it agrees."""
    thresholds = thresholds or SkinThresholds()
    if sample.shape != image.shape[:2]:
        raise InvalidFrameError(f"sample {sample.shape} does not match the image {image.shape[:2]}")
    chromaticity, luma = _chromaticity_and_luma(image, thresholds.blur_px)
    usable = sample & (luma > _MIN_SAMPLE_LUMA)
    if usable.sum() < 10:
        raise InvalidFrameError("the skin sample is empty or too dark to fit a skin colour")
    values = chromaticity[usable].astype(np.float64)
    floor = np.diag(np.square(np.asarray(thresholds.min_chroma_spread, np.float64)))
    first = values
    if start is not None and (start & usable).sum() >= 10:
        first = chromaticity[start & usable].astype(np.float64)
    mean = np.median(first, axis=0)
    # robust start: the covariance of what lies within 5 robust sigmas (MAD) of the median, so a
    # sample half in the background cannot start the fit wide open
    spread = np.maximum(1.4826 * np.median(np.abs(first - mean), axis=0), np.sqrt(np.diag(floor)))
    near = (np.abs(first - mean) <= 5.0 * spread).all(axis=1)
    covariance = np.cov((first[near] - mean).T) + floor if near.sum() >= 10 else np.diag(np.square(spread))
    kept = np.ones(len(values), bool)
    for _ in range(_TRIM_ROUNDS):
        offsets = values - mean
        distance_squared = np.einsum("ni,ij,nj->n", offsets, np.linalg.inv(covariance), offsets)
        kept = distance_squared < _TRIM_SIGMAS**2
        if kept.sum() < 10:
            break
        mean = values[kept].mean(axis=0)
        covariance = np.cov((values[kept] - mean).T) / _TRIMMED_VARIANCE
        covariance = covariance + np.diag(np.maximum(np.diag(floor) - np.diag(covariance), 0.0))
    return SkinColourModel(
        chroma_mean=mean.astype(np.float32),
        chroma_covariance=covariance.astype(np.float32),
        luma_median=float(np.median(luma[usable])),
        inlier_fraction=float(kept.mean()),
    )


def score_skin_cpu(
    image: NDArray[np.uint8],
    model: SkinColourModel,
    thresholds: SkinThresholds | None = None,
    *,
    illumination_px: float = 16.0,
    expected_luma: NDArray[np.float32] | None = None,
) -> SkinScores:
    """How skin-like each pixel of `image` is under `model`, by colour and by brightness (compared with
    the skin within about `illumination_px`: a tenth of the face height suits). `expected_luma`: the
    skin's brightness the light on the face leads one to expect per pixel (+inf: no expectation); a
    pixel is dark only where it is far below that too (a face's shadowed side is not)."""
    thresholds = thresholds or SkinThresholds()
    chromaticity, luma = _chromaticity_and_luma(image, thresholds.blur_px)
    # per chromaticity plane (r, g): at a face's working size (a few thousand pixels) each NumPy call
    # costs more than its arithmetic, so the 2 x 2 algebra is written out
    to_r, to_g = (float(v) for v in _NEUTRAL - model.chroma_mean)
    offset_r = chromaticity[..., 0] - np.float32(model.chroma_mean[0])
    offset_g = chromaticity[..., 1] - np.float32(model.chroma_mean[1])
    along = (offset_r * to_r + offset_g * to_g) / np.float32(max(to_r * to_r + to_g * to_g, 1e-9))
    brighter = np.clip((luma - model.luma_median) / max(255.0 - model.luma_median, 1.0), 0.0, 1.0)
    highlight = np.clip(along, 0.0, brighter * thresholds.specular_allowance)
    residual_r, residual_g = offset_r - highlight * to_r, offset_g - highlight * to_g
    (a, b), (c, d) = model.chroma_covariance.astype(np.float64)
    determinant = a * d - b * c
    inverse_rr, inverse_rg, inverse_gg = d / determinant, -(b + c) / determinant, a / determinant
    squared = residual_r * residual_r * np.float32(inverse_rr)
    squared += residual_g * residual_g * np.float32(inverse_gg)
    squared += residual_r * residual_g * np.float32(inverse_rg)
    distance = np.sqrt(np.maximum(squared, 0.0))
    relative_luma = luma / max(model.luma_median, 1.0)
    darkness = np.clip(1.0 - relative_luma / 0.7, 0.0, 1.0)
    distance = distance / (1.0 + thresholds.dark_chroma_room * darkness)
    chroma = 1.0 - smoothstep(
        ((distance - thresholds.chroma_distance) / thresholds.chroma_falloff).astype(np.float32)
    )
    # the light falling on this part of the face: bright skin-coloured pixels around it
    weights = (chroma * np.clip(relative_luma, 0.0, 1.5)).astype(np.float32)
    surrounding = cv2.GaussianBlur(luma * weights, (0, 0), illumination_px) / np.maximum(
        cv2.GaussianBlur(weights, (0, 0), illumination_px), 1e-3
    )
    below_median = relative_luma
    if expected_luma is not None:  # in a shadow both comparisons are with the light expected there
        surrounding = np.minimum(surrounding, expected_luma)
        below_median = luma / np.maximum(np.minimum(expected_luma, np.float32(model.luma_median)), 1.0)
    locally = luma / np.maximum(surrounding, 1.0)
    dark = (1.0 - _ramp(below_median, thresholds.dark_luma)) * (1.0 - _ramp(locally, thresholds.dark_local))
    return SkinScores(
        chroma=chroma.astype(np.float32),
        luma=(1.0 - dark).astype(np.float32),
        towards_neutral=along.astype(np.float32),
    )


def _ramp(values: NDArray[np.float32], limits: tuple[float, float]) -> NDArray[np.float32]:
    low, high = limits
    return smoothstep(((values - low) / max(high - low, 1e-3)).astype(np.float32))


def fit_skin_model(
    image: Any, sample: Any, thresholds: SkinThresholds | None = None, start: Any = None
) -> SkinColourModel:
    """Dispatcher: fitted once per source on the host; device input is copied back."""
    return fit_skin_model_cpu(
        to_host(image), to_host(sample), thresholds, None if start is None else to_host(start)
    )


def score_skin(
    image: Any,
    model: SkinColourModel,
    thresholds: SkinThresholds | None = None,
    *,
    illumination_px: float = 16.0,
) -> SkinScores:
    """Dispatcher: see `fit_skin_model`."""
    return score_skin_cpu(to_host(image), model, thresholds, illumination_px=illumination_px)
