"""Hands in a frame (MediaPipe palm detection + hand landmarks): where a hand in front of a face is.

Two models, as MediaPipe's hand pipeline runs them:
1. palm_lite / palm_full: the frame letterboxed into 192 x 192 (aspect kept, centred, zero padding),
   2016 SSD anchors (strides 8, 16, 16, 16; 2 and 6 per cell), each a box and 7 key points relative to
   its anchor and a score logit; scores >= `PALM_SCORE` kept, then weighted NMS at IoU 0.3.
2. hand_landmark_lite / _full on each palm's rotated square ROI (fingers up, 2.6 x the palm box,
   shifted half a box towards the fingers), 224 x 224: 21 x (x, y, z) crop px and a presence probability.
The palm detector fires near 0.55 on bare skin (a cheek, a neck); the landmark model's presence
(> `MIN_PRESENCE`) rejects those, so only hands with presence are returned.
"""

import logging
from dataclasses import dataclass

import cv2
import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray

from gpu_ops.backend import to_host
from gpu_ops.errors import InvalidFrameError
from models.errors import ModelContractError
from models.face import Frame
from models.inference import check_contract
from models.registry import ModelSpec

logger = logging.getLogger(__name__)

FloatArray = NDArray[np.float32]

PALM_SIZE = 192
PALM_STRIDES = (8, 16, 16, 16)
PALM_SCORE = 0.5
NMS_IOU = 0.3
ROI_SCALE, ROI_SHIFT = 2.6, -0.5  # side = scale x max(w, h); centre moved by shift x h along the hand's y
MIN_PRESENCE = 0.5
MAX_HANDS = 2


@dataclass(frozen=True)
class Palm:
    """One palm detection in frame px: box centre and size, 7 key points (0 wrist, 2 middle-finger MCP)."""

    centre: FloatArray  # [2]
    size: FloatArray  # [2] width, height
    points: FloatArray  # [7, 2]
    score: float


@dataclass(frozen=True)
class Hand:
    """One hand: 21 landmarks in frame px (z in the same px scale) and the landmark model's presence."""

    points: FloatArray  # [21, 3]
    presence: float
    palm_score: float

    def hull(self) -> FloatArray:
        """The convex outline of the hand's landmarks, [K, 2] frame px."""
        return np.asarray(cv2.convexHull(self.points[:, :2].astype(np.float32)), np.float32).reshape(-1, 2)


def palm_anchors() -> FloatArray:
    """[2016, 2] anchor centres in [0, 1] (MediaPipe's SSD anchors for the 192-px palm model)."""
    centres: list[FloatArray] = []
    index = 0
    while index < len(PALM_STRIDES):
        stride = PALM_STRIDES[index]
        repeats = 0
        while index < len(PALM_STRIDES) and PALM_STRIDES[index] == stride:
            repeats += 2  # two anchors (aspect 1 and the interpolated scale) per layer
            index += 1
        cells = PALM_SIZE // stride
        grid = (np.arange(cells, dtype=np.float32) + 0.5) / cells
        ys, xs = np.meshgrid(grid, grid, indexing="ij")
        cell_centres = np.stack([xs.ravel(), ys.ravel()], axis=1)
        centres.append(np.repeat(cell_centres, repeats, axis=0))
    return np.concatenate(centres).astype(np.float32)


_ANCHORS = palm_anchors()


def letterbox(frame: NDArray[np.uint8], size: int) -> tuple[FloatArray, float, FloatArray]:
    """The frame fitted into a size x size square (aspect kept, zero padding): [1, s, s, 3] in [0, 1],
    the scale (square px per frame px) and the padding offset [2] in square px."""
    height, width = frame.shape[:2]
    scale = size / max(width, height)
    new_w, new_h = max(1, round(width * scale)), max(1, round(height * scale))
    offset = np.array([(size - new_w) / 2.0, (size - new_h) / 2.0], np.float32)
    square = np.zeros((size, size, 3), np.float32)
    x0, y0 = int(offset[0]), int(offset[1])
    resized = cv2.resize(frame, (new_w, new_h), interpolation=cv2.INTER_AREA).astype(np.float32)
    square[y0 : y0 + new_h, x0 : x0 + new_w] = resized * np.float32(1.0 / 255.0)
    return square[None], scale, np.array([x0, y0], np.float32)


def _iou(box: FloatArray, boxes: FloatArray) -> FloatArray:
    low = np.maximum(box[:2] - box[2:] / 2, boxes[:, :2] - boxes[:, 2:] / 2)
    high = np.minimum(box[:2] + box[2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2)
    inter = np.prod(np.clip(high - low, 0.0, None), axis=1)
    union = np.prod(box[2:]) + np.prod(boxes[:, 2:], axis=1) - inter
    return np.asarray(inter / np.maximum(union, 1e-9), np.float32)


def decode_palms(
    regressors: FloatArray, logits: FloatArray, score_threshold: float = PALM_SCORE
) -> FloatArray:
    """[M, 19] kept detections (cx, cy, w, h, 7 x (x, y), score) in [0, 1] square units, weighted NMS."""
    raw = np.asarray(regressors, np.float32).reshape(-1, 18)
    scores = 1.0 / (1.0 + np.exp(-np.clip(np.asarray(logits, np.float32).reshape(-1), -100.0, 100.0)))
    decoded = (raw / PALM_SIZE).astype(np.float32)
    decoded[:, 0:2] += _ANCHORS
    decoded[:, 4::2] += _ANCHORS[:, 0:1]
    decoded[:, 5::2] += _ANCHORS[:, 1:2]
    order = np.argsort(-scores)
    order = order[scores[order] >= score_threshold]
    kept: list[FloatArray] = []
    while len(order):
        overlaps = _iou(decoded[order[0], 0:4].astype(np.float32), decoded[order, 0:4].astype(np.float32))
        group = order[overlaps > NMS_IOU]
        weights = scores[group][:, None]
        merged = (decoded[group] * weights).sum(axis=0) / weights.sum()
        kept.append(np.append(merged, scores[order[0]]).astype(np.float32))
        order = order[overlaps <= NMS_IOU]
    return np.stack(kept) if kept else np.zeros((0, 19), np.float32)


def roi_matrix(palm: Palm, crop_size: int) -> NDArray[np.float64]:
    """The frame -> crop affine (cv2.warpAffine) of the palm's rotated square hand ROI, fingers up."""
    wrist, middle = palm.points[0].astype(np.float64), palm.points[2].astype(np.float64)
    rotation = np.pi / 2.0 - np.arctan2(-(middle[1] - wrist[1]), middle[0] - wrist[0])
    cos, sin = np.cos(rotation), np.sin(rotation)
    width, height = float(palm.size[0]), float(palm.size[1])
    # the centre moves along the rotated y axis (towards the fingers for a negative shift)
    centre = palm.centre.astype(np.float64) + np.array([-sin, cos]) * ROI_SHIFT * height
    side = ROI_SCALE * max(width, height)
    factor = crop_size / side
    # crop = factor * R(-rotation) @ (p - centre) + crop_size / 2
    matrix = np.zeros((2, 3), np.float64)
    matrix[:, :2] = factor * np.array([[cos, sin], [-sin, cos]])
    matrix[:, 2] = crop_size / 2.0 - matrix[:, :2] @ centre
    return matrix


class HandFinder:
    """Palm detection, then hand landmarks on each palm; hands without presence are dropped."""

    def __init__(
        self,
        palm_session: ort.InferenceSession,
        palm_spec: ModelSpec,
        landmark_session: ort.InferenceSession,
        landmark_spec: ModelSpec,
    ) -> None:
        if palm_spec.role != "palm_detector" or landmark_spec.role != "hand_landmarker":
            raise ModelContractError(
                f"{palm_spec.name} + {landmark_spec.name} are not a palm and a hand model"
            )
        check_contract(palm_session, palm_spec)
        check_contract(landmark_session, landmark_spec)
        self._palm, self._landmark = palm_session, landmark_session
        self._palm_names = [tensor.name for tensor in palm_spec.outputs]
        self._landmark_names = [tensor.name for tensor in landmark_spec.outputs[:2]]
        self._crop_size = (landmark_spec.input_size or (224, 224))[0]

    def palms(self, frame: NDArray[np.uint8], score_threshold: float = PALM_SCORE) -> list[Palm]:
        """Palm detections in frame px, best first (false positives on skin included)."""
        square, scale, offset = letterbox(frame, PALM_SIZE)
        regressors, logits = self._palm.run(self._palm_names, {"input_1": square})
        found = decode_palms(regressors, logits, score_threshold)
        palms = []
        for row in found[: MAX_HANDS * 2]:
            to_frame = (row[0:18].reshape(9, 2) * PALM_SIZE - offset) / scale
            palms.append(
                Palm(
                    centre=to_frame[0].astype(np.float32),
                    size=(row[2:4] * PALM_SIZE / scale).astype(np.float32),
                    points=to_frame[2:9].astype(np.float32),
                    score=float(row[18]),
                )
            )
        return palms

    def landmarks(self, frame: NDArray[np.uint8], palm: Palm) -> Hand:
        """The 21 landmarks of the hand around one palm, with the model's presence."""
        matrix = roi_matrix(palm, self._crop_size)
        crop = cv2.warpAffine(frame, matrix, (self._crop_size, self._crop_size), flags=cv2.INTER_LINEAR)
        tensor = (crop.astype(np.float32) * np.float32(1.0 / 255.0))[None]
        points, presence = self._landmark.run(self._landmark_names, {"input_1": tensor})
        crop_points = np.asarray(points, np.float32).reshape(21, 3)
        inverse = cv2.invertAffineTransform(matrix)
        frame_points = np.empty_like(crop_points)
        frame_points[:, :2] = crop_points[:, :2] @ inverse[:, :2].T + inverse[:, 2]
        frame_points[:, 2] = crop_points[:, 2] / float(np.sqrt(abs(np.linalg.det(matrix[:, :2]))))
        return Hand(frame_points, float(np.asarray(presence).reshape(-1)[0]), palm.score)

    def find(self, frame: Frame) -> list[Hand]:
        """The hands of an RGB frame (landmarks with presence > MIN_PRESENCE), at most MAX_HANDS."""
        host = to_host(frame)
        if host.ndim != 3 or host.shape[2] != 3 or host.dtype != np.uint8:
            raise InvalidFrameError(f"hand finder needs an H x W x 3 uint8 RGB frame, got {host.shape}")
        hands = [self.landmarks(host, palm) for palm in self.palms(host)]
        return [hand for hand in hands if hand.presence > MIN_PRESENCE][:MAX_HANDS]
