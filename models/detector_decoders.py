"""Output decoders of the face detectors: one small function per registry `decoder` key.

Each decoder turns the raw outputs of ONE image (batch axis already removed) into candidate boxes,
scores and 5 points in model-input pixels, keeps only scores >= threshold, and returns the points in
InsightFace order (eye image-left, eye image-right, nose, mouth image-left, mouth image-right).
NMS and the mapping back to frame pixels belong to `models.detector`. Formulas: the models MANIFEST (docs/models.md says where the files come from).
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from models.errors import ModelContractError

FloatArray = NDArray[np.float32]
InputSize = tuple[int, int]  # (width, height) of the model input


@dataclass(frozen=True)
class Candidates:
    """Decoded detections of one image before NMS, in model-input pixels."""

    boxes: FloatArray  # [M,4] x1, y1, x2, y2
    scores: FloatArray  # [M]
    landmarks_5: FloatArray  # [M,5,2]

    @staticmethod
    def empty() -> "Candidates":
        return Candidates(
            np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0, 5, 2), np.float32)
        )


@dataclass(frozen=True)
class DecoderDefaults:
    """Thresholds the model's authors (and the MANIFEST checks) use."""

    score_threshold: float
    nms_threshold: float


Decoder = Callable[[Mapping[str, FloatArray], InputSize, float], Candidates]

_STRIDES = (8, 16, 32)
# Native keypoint order -> InsightFace order. All three models already list the image-left eye and
# mouth corner first (checked on the MANIFEST photos); kept explicit so a new variant states its own.
_IDENTITY_ORDER = np.array([0, 1, 2, 3, 4])
_RETINAFACE_MIN_SIZES = {8: (16.0, 32.0), 16: (64.0, 128.0), 32: (256.0, 512.0)}


@lru_cache(maxsize=32)
def _cell_centres(input_size: InputSize, stride: int, anchors_per_cell: int, offset: float) -> FloatArray:
    """[(H/s)*(W/s)*anchors, 2] cell origins (x, y) in input px, row-major, anchors repeated per cell."""
    width, height = input_size
    cols = -(-width // stride)
    rows = -(-height // stride)
    ys, xs = np.mgrid[0:rows, 0:cols].astype(np.float32)
    centres = np.stack([(xs.ravel() + offset) * stride, (ys.ravel() + offset) * stride], axis=1)
    centres = np.repeat(centres, anchors_per_cell, axis=0)
    centres.setflags(write=False)
    return centres


def _check_rows(name: str, tensor: FloatArray, rows: int) -> None:
    if tensor.shape[0] != rows:
        raise ModelContractError(f"detector output {name!r} has {tensor.shape[0]} rows, expected {rows}")


def _reorder(points: FloatArray, order: NDArray[np.int64]) -> FloatArray:
    return np.ascontiguousarray(points.reshape(-1, 5, 2)[:, order, :], dtype=np.float32)


def decode_yunet(outputs: Mapping[str, FloatArray], input_size: InputSize, threshold: float) -> Candidates:
    """YuNet: one anchor per cell; score = sqrt(cls * obj); box and points in units of the stride."""
    parts: list[Candidates] = []
    for stride in _STRIDES:
        cell = _cell_centres(input_size, stride, 1, 0.0)
        cls = np.clip(outputs[f"cls_{stride}"].reshape(-1), 0.0, 1.0)
        obj = np.clip(outputs[f"obj_{stride}"].reshape(-1), 0.0, 1.0)
        _check_rows(f"cls_{stride}", cls, len(cell))
        scores = np.sqrt(cls * obj)
        keep = np.nonzero(scores >= threshold)[0]
        if len(keep) == 0:
            continue
        origin = cell[keep]
        bbox = outputs[f"bbox_{stride}"].reshape(-1, 4)[keep]
        centre = origin + bbox[:, 0:2] * stride
        size = np.exp(bbox[:, 2:4]) * stride
        boxes = np.concatenate([centre - size / 2.0, centre + size / 2.0], axis=1)
        kps = outputs[f"kps_{stride}"].reshape(-1, 5, 2)[keep]
        points = origin[:, None, :] + kps * stride
        parts.append(Candidates(boxes.astype(np.float32), scores[keep], _reorder(points, _IDENTITY_ORDER)))
    return _concatenate(parts)


def decode_scrfd(outputs: Mapping[str, FloatArray], input_size: InputSize, threshold: float) -> Candidates:
    """SCRFD: two anchors per cell at (c*s, r*s); box = centre -/+ distances*s; points = centre + k*s."""
    parts: list[Candidates] = []
    for stride in _STRIDES:
        cell = _cell_centres(input_size, stride, 2, 0.0)
        scores = outputs[f"score_{stride}"].reshape(-1)
        _check_rows(f"score_{stride}", scores, len(cell))
        keep = np.nonzero(scores >= threshold)[0]
        if len(keep) == 0:
            continue
        origin = cell[keep]
        distances = outputs[f"bbox_{stride}"].reshape(-1, 4)[keep] * stride
        boxes = np.concatenate([origin - distances[:, 0:2], origin + distances[:, 2:4]], axis=1)
        points = origin[:, None, :] + outputs[f"kps_{stride}"].reshape(-1, 5, 2)[keep] * stride
        parts.append(
            Candidates(
                boxes.astype(np.float32), scores[keep].astype(np.float32), _reorder(points, _IDENTITY_ORDER)
            )
        )
    return _concatenate(parts)


@lru_cache(maxsize=16)
def _retinaface_priors(input_size: InputSize) -> FloatArray:
    """[P,4] prior boxes (cx, cy, w, h) in input px: per stride, per cell, per min size."""
    blocks = []
    for stride in _STRIDES:
        sizes = _RETINAFACE_MIN_SIZES[stride]
        centres = _cell_centres(input_size, stride, len(sizes), 0.5)
        wh = np.tile(np.asarray(sizes, np.float32), len(centres) // len(sizes))[:, None].repeat(2, axis=1)
        blocks.append(np.concatenate([centres, wh], axis=1))
    priors = np.concatenate(blocks, axis=0).astype(np.float32)
    priors.setflags(write=False)
    return priors


def decode_retinaface(
    outputs: Mapping[str, FloatArray], input_size: InputSize, threshold: float
) -> Candidates:
    """RetinaFace: SSD-style priors with variances (0.1, 0.2); face score is softmax column 1."""
    priors = _retinaface_priors(input_size)
    conf = outputs["conf"].reshape(-1, 2)
    _check_rows("conf", conf, len(priors))
    scores = conf[:, 1]
    keep = np.nonzero(scores >= threshold)[0]
    if len(keep) == 0:
        return Candidates.empty()
    prior = priors[keep]
    loc = outputs["loc"].reshape(-1, 4)[keep]
    centre = prior[:, 0:2] + loc[:, 0:2] * 0.1 * prior[:, 2:4]
    size = prior[:, 2:4] * np.exp(loc[:, 2:4] * 0.2)
    boxes = np.concatenate([centre - size / 2.0, centre + size / 2.0], axis=1)
    offsets = outputs["landmarks"].reshape(-1, 5, 2)[keep]
    points = prior[:, None, 0:2] + offsets * 0.1 * prior[:, None, 2:4]
    return Candidates(
        boxes.astype(np.float32), scores[keep].astype(np.float32), _reorder(points, _IDENTITY_ORDER)
    )


def _concatenate(parts: list[Candidates]) -> Candidates:
    if not parts:
        return Candidates.empty()
    return Candidates(
        np.concatenate([p.boxes for p in parts]).astype(np.float32),
        np.concatenate([p.scores for p in parts]).astype(np.float32),
        np.concatenate([p.landmarks_5 for p in parts]).astype(np.float32),
    )


DECODERS: dict[str, tuple[Decoder, DecoderDefaults]] = {
    "yunet": (decode_yunet, DecoderDefaults(score_threshold=0.6, nms_threshold=0.3)),
    "scrfd": (decode_scrfd, DecoderDefaults(score_threshold=0.5, nms_threshold=0.4)),
    "retinaface": (decode_retinaface, DecoderDefaults(score_threshold=0.6, nms_threshold=0.4)),
}


def decoder_for(decoder_key: str) -> tuple[Decoder, DecoderDefaults]:
    """The one place a detector variant's decoder is chosen."""
    try:
        return DECODERS[decoder_key]
    except KeyError:
        raise ModelContractError(
            f"no detector decoder {decoder_key!r}; known: {', '.join(sorted(DECODERS))}"
        ) from None
