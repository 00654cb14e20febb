"""Dense face landmarks: a frame plus each face's 5 points and box in, [N,P,3] frame-px points out.

facemesh_468 (MediaPipe): NHWC 192 RGB /255 crop, a square of 1.5 x the box's long side around the box
centre, rotated so the eye line is horizontal; outputs 468 x (x, y, z) crop px + a presence logit.
pfld_68: NCHW 112 RGB /255 crop, an upright square of 1.1 x the box's long side; 68 x (x, y) in [0, 1].
Points come back in frame px (z scaled like x and y; 0 for 2-D models); presence in [0, 1].
"""

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray

from gpu_ops.errors import InvalidFrameError
from models.errors import ModelContractError
from models.face import Frame
from models.inference import check_contract
from models.model_input import prepare_crops
from models.registry import ModelSpec
from models.session_io import fixed_batch_size, run_chunked_to_host

logger = logging.getLogger(__name__)

FloatArray = NDArray[np.float32]


@dataclass(frozen=True)
class FaceLandmarks:
    """Landmarks of N faces; `presence` is the model's face probability (1.0 where it has none)."""

    points: FloatArray  # [N,P,3] x, y frame px, z relative depth in the same px scale
    presence: FloatArray  # [N]

    def __len__(self) -> int:
        return int(self.presence.shape[0])


@dataclass(frozen=True)
class CropRule:
    """How a landmark model's input crop is cut from the box and 5 points."""

    box_scale: float  # crop side = box_scale * max(box width, box height)
    align_eyes: bool  # rotate so the eye line is horizontal


def crop_matrices(
    landmarks_5: FloatArray, boxes: FloatArray, rule: CropRule, crop_size: int
) -> NDArray[np.float64]:
    """[N,2,3] frame -> crop affine matrices (cv2.warpAffine convention) of square face crops."""
    matrices = np.zeros((len(boxes), 2, 3), np.float64)
    for index, (box, points) in enumerate(
        zip(np.asarray(boxes, np.float64), np.asarray(landmarks_5, np.float64))
    ):
        centre = (box[0:2] + box[2:4]) / 2.0
        side = rule.box_scale * max(box[2] - box[0], box[3] - box[1], 1.0)
        angle = 0.0
        if rule.align_eyes:
            eye_vector = points[1] - points[0]
            angle = float(np.arctan2(eye_vector[1], eye_vector[0]))
        factor = crop_size / side
        cos, sin = np.cos(angle) * factor, np.sin(angle) * factor
        # crop = factor * R(-angle) @ (p - centre) + crop_size / 2
        rotation = np.array([[cos, sin], [-sin, cos]])
        matrices[index, :, 0:2] = rotation
        matrices[index, :, 2] = crop_size / 2.0 - rotation @ centre
    return matrices


def _crop_to_frame(points_crop: FloatArray, affine_matrices: NDArray[np.float64]) -> FloatArray:
    """Map [N,P,3] crop points back to frame px; z is scaled by the crop's px size."""
    result = np.empty_like(points_crop, dtype=np.float32)
    for index, matrix in enumerate(affine_matrices):
        inverse = cv2.invertAffineTransform(matrix)
        xy = points_crop[index, :, 0:2].astype(np.float64)
        result[index, :, 0:2] = xy @ inverse[:, 0:2].T + inverse[:, 2]
        factor = float(np.sqrt(abs(np.linalg.det(matrix[:, 0:2]))))
        result[index, :, 2] = points_crop[index, :, 2] / factor
    return result


def postprocess_facemesh(
    outputs: Sequence[FloatArray], affine_matrices: NDArray[np.float64], crop_size: int
) -> FaceLandmarks:
    """conv2d_21 [N,1,1,1404] crop px -> [N,468,3] frame px; conv2d_31 logit -> sigmoid presence."""
    points_crop = np.asarray(outputs[0], np.float32).reshape(len(affine_matrices), 468, 3)
    logits = np.clip(np.asarray(outputs[1], np.float32).reshape(-1), -60.0, 60.0)
    presence = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return FaceLandmarks(_crop_to_frame(points_crop, affine_matrices), presence)


def postprocess_pfld(
    outputs: Sequence[FloatArray], affine_matrices: NDArray[np.float64], crop_size: int
) -> FaceLandmarks:
    """output [N,136] in [0, 1] of the crop -> [N,68,3] frame px (z = 0), presence 1."""
    count = len(affine_matrices)
    points_crop = np.zeros((count, 68, 3), np.float32)
    points_crop[:, :, 0:2] = np.asarray(outputs[0], np.float32).reshape(count, 68, 2) * crop_size
    return FaceLandmarks(_crop_to_frame(points_crop, affine_matrices), np.ones(count, np.float32))


Postprocess = Callable[[Sequence[FloatArray], NDArray[np.float64], int], FaceLandmarks]

# decoder key -> (crop rule, output decoder, points per face); the one place a variant is chosen
_VARIANTS: dict[str, tuple[CropRule, Postprocess, int]] = {
    "facemesh": (CropRule(box_scale=1.5, align_eyes=True), postprocess_facemesh, 468),
    "pfld": (CropRule(box_scale=1.1, align_eyes=False), postprocess_pfld, 68),
}


class Landmarker:
    """Runs one landmark session over all faces of a frame (batched when the file allows it)."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec) -> None:
        if spec.role != "landmarker" or spec.input_size is None:
            raise ModelContractError(f"{spec.name} is not a landmark model with a fixed input size")
        variant = _VARIANTS.get(spec.decoder)
        if variant is None:
            raise ModelContractError(
                f"no landmark decoder {spec.decoder!r}; known: {', '.join(sorted(_VARIANTS))}"
            )
        check_contract(session, spec)
        self.spec = spec
        self.crop_rule, self._postprocess, self.point_count = variant
        self.crop_size = spec.input_size[0]
        self._session = session
        self._input_name = spec.inputs[0].name
        self._output_names = [tensor.name for tensor in spec.outputs]
        self._max_batch = fixed_batch_size(session)

    @property
    def fixed_batch(self) -> int | None:
        """The file's fixed batch (faces per session run), None when any number runs in one call."""
        return self._max_batch

    def forward(self, tensor: Any) -> list[FloatArray]:
        """Run the session (NumPy, or CuPy bound in place), in chunks of the file's fixed batch size."""
        return run_chunked_to_host(
            self._session, self._input_name, tensor, self._output_names, self._max_batch
        )

    def detect(self, frame: Frame, landmarks_5: FloatArray, boxes: FloatArray) -> FaceLandmarks:
        """Landmarks of the N faces given by their 5 points [N,5,2] and boxes [N,4] (frame px)."""
        return self.detect_batch([frame], [landmarks_5], [boxes])[0]

    def detect_batch(
        self, frames: Sequence[Frame], landmarks_5: Sequence[FloatArray], boxes: Sequence[FloatArray]
    ) -> list[FaceLandmarks]:
        """`detect` for the faces of many frames (of any sizes) with one crop launch and one model run:
        N streams' faces cost one batched call."""
        for frame in frames:
            if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
                raise InvalidFrameError(
                    f"landmarker needs H x W x 3 uint8 RGB frames, got {frame.shape} {frame.dtype}"
                )
        counts = [len(frame_boxes) for frame_boxes in boxes]
        if sum(counts) == 0:
            empty = FaceLandmarks(np.zeros((0, self.point_count, 3), np.float32), np.zeros((0,), np.float32))
            return [empty for _ in frames]
        matrices = np.concatenate(
            [
                crop_matrices(points, frame_boxes, self.crop_rule, self.crop_size)
                for points, frame_boxes in zip(landmarks_5, boxes)
                if len(frame_boxes)
            ]
        )
        frame_index = np.repeat(np.arange(len(frames), dtype=np.intp), counts)
        outputs = self.forward(prepare_crops(frames, frame_index, matrices, self.spec))
        found = self._postprocess(outputs, matrices, self.crop_size)
        bounds = np.cumsum([0, *counts])
        return [
            FaceLandmarks(found.points[start:stop], found.presence[start:stop])
            for start, stop in itertools.pairwise(bounds)
        ]
