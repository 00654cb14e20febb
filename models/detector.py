"""Face detector: RGB uint8 frames in, boxes + scores + 5 points in frame pixels out.

Input: `models.face.Frame` (H x W x 3 RGB uint8). The frame is letterboxed (aspect kept, padded
right/bottom) into the model input (multiples of 32), converted to the model's colour order and
normalisation from its `ModelSpec`, decoded by the variant's decoder, NMS'd and scaled back.
Output: `Detections` (boxes [N,4] x1,y1,x2,y2, scores [N], landmarks_5 [N,5,2] InsightFace order).
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray

from gpu_ops.affine_crop import crop_faces
from gpu_ops.backend import get_array_module, is_device_array
from gpu_ops.errors import InvalidFrameError
from models.detector_decoders import Candidates, decoder_for
from models.errors import ModelContractError
from models.face import Frame
from models.inference import check_contract
from models.registry import ModelSpec
from models.session_io import fixed_batch_size, run_chunked_to_host

logger = logging.getLogger(__name__)

FloatArray = NDArray[np.float32]
InputSize = tuple[int, int]  # (width, height)


@dataclass(frozen=True)
class Detections:
    """Faces found in one frame, best score first; empty arrays (not None) when there are none."""

    boxes: FloatArray  # [N,4] x1, y1, x2, y2 frame px
    scores: FloatArray  # [N]
    landmarks_5: FloatArray  # [N,5,2] frame px, InsightFace order

    @staticmethod
    def empty() -> "Detections":
        return Detections(
            np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0, 5, 2), np.float32)
        )

    def __len__(self) -> int:
        return int(self.scores.shape[0])


def fit_input_size(frame_size: tuple[int, int], width: int) -> InputSize:
    """Model input (w, h) of the given width whose height fits the frame's aspect, multiples of 32."""
    frame_width, frame_height = frame_size
    width = max(32, -(-width // 32) * 32)
    height = max(32, -(-round(width * frame_height / frame_width) // 32) * 32)
    return width, height


def letterbox_scale(frame_size: tuple[int, int], input_size: InputSize) -> float:
    """Factor frame px -> input px that fits the whole frame inside the input."""
    return min(input_size[0] / frame_size[0], input_size[1] / frame_size[1])


def letterbox_matrices(
    count: int, frame_size: tuple[int, int], input_size: InputSize, prefilter: int = 1
) -> FloatArray:
    """[N,2,3] affine from a frame box-averaged by `prefilter` to the letterbox input, pixel centres
    aligned as a resize aligns them (x_in = s * x + (s - 1) / 2)."""
    scale = letterbox_scale(frame_size, input_size) * prefilter
    shift = 0.5 * scale - 0.5
    matrix = np.array([[scale, 0.0, shift], [0.0, scale, shift]], np.float32)
    return np.repeat(matrix[None], count, axis=0)


def box_average(frame: Any, factor: int) -> Any:
    """Mean of each `factor` x `factor` block (rows/columns past the last whole block dropped), uint8."""
    if factor <= 1:
        return frame
    xp = get_array_module(frame)
    height, width = (frame.shape[0] // factor) * factor, (frame.shape[1] // factor) * factor
    blocks = frame[:height, :width].reshape(height // factor, factor, width // factor, factor, 3)
    return xp.rint(blocks.mean(axis=(1, 3), dtype=xp.float32)).astype(xp.uint8)


def _check_same_size(frames: Sequence[Any]) -> None:
    for frame in frames:
        if frame.shape != frames[0].shape:
            raise InvalidFrameError(
                f"detect_batch needs frames of one size: {frame.shape} vs {frames[0].shape}"
            )


def prepare_detector_input_by_crop(frames: Sequence[Any], input_size: InputSize, spec: ModelSpec) -> Any:
    """`prepare_detector_input` built from array ops plus one batched crop launch: the device path.

    Area resampling, which detectors are trained on, is approximated by an integer box average down to
    within 2x of the input scale, then a bilinear resize (which at scale 1/2 is itself a 2x2 average). The
    crop replicates borders, so the letterbox padding is then set to what a zero pixel normalises to.
    """
    _check_same_size(frames)
    height, width = frames[0].shape[:2]
    scale = letterbox_scale((width, height), input_size)
    factor = max(1, int(1.0 / scale))  # the residual bilinear scale lands in (0.5, 1]
    tensor = crop_faces(
        [box_average(frame, factor) for frame in frames],
        np.arange(len(frames), dtype=np.intp),
        letterbox_matrices(len(frames), (width, height), input_size, factor),
        input_size,
        scale=spec.scale,
        mean=spec.mean,
        std=spec.std,
        swap_rb=spec.color_order == "bgr",
        layout="nchw",
    )
    resized_width = min(input_size[0], round(width * scale))
    resized_height = min(input_size[1], round(height * scale))
    for channel in range(3):  # mean and std are in the model's channel order, as in the crop
        padding = np.float32((0.0 - spec.mean[channel]) / spec.std[channel])
        tensor[:, channel, resized_height:, :] = padding
        tensor[:, channel, :, resized_width:] = padding
    return tensor


def prepare_detector_input(frames: Sequence[Any], input_size: InputSize, spec: ModelSpec) -> Any:
    """[N,3,h,w] float32: each frame resized by `letterbox_scale`, padded right/bottom with zeros,
    in the spec's colour order and normalisation (x * scale - mean) / std. CuPy frames give a CuPy
    tensor (`prepare_detector_input_by_crop`); host frames use OpenCV's area resize."""
    if is_device_array(frames[0]):
        return prepare_detector_input_by_crop(frames, input_size, spec)
    _check_same_size(frames)
    width, height = input_size
    frame_height, frame_width = frames[0].shape[:2]
    scale = letterbox_scale((frame_width, frame_height), input_size)
    resized_size = (min(width, round(frame_width * scale)), min(height, round(frame_height * scale)))
    canvas = np.zeros((len(frames), height, width, 3), np.uint8)
    for index, frame in enumerate(frames):
        interpolation = cv2.INTER_AREA if scale < 1.0 else cv2.INTER_LINEAR
        canvas[index, : resized_size[1], : resized_size[0]] = cv2.resize(
            frame, resized_size, interpolation=interpolation
        )
    if spec.color_order == "bgr":
        canvas = canvas[..., ::-1]
    tensor = canvas.transpose(0, 3, 1, 2).astype(np.float32)
    mean = np.asarray(spec.mean, np.float32).reshape(1, 3, 1, 1)
    std = np.asarray(spec.std, np.float32).reshape(1, 3, 1, 1)
    if spec.scale != 1.0:
        tensor *= np.float32(spec.scale)
    if spec.mean != (0.0, 0.0, 0.0) or spec.std != (1.0, 1.0, 1.0):
        tensor = (tensor - mean) / std
    return np.ascontiguousarray(tensor, dtype=np.float32)


def non_max_suppression(boxes: FloatArray, scores: FloatArray, iou_threshold: float) -> NDArray[np.int64]:
    """Indices of the boxes kept by greedy NMS, best score first."""
    order = np.argsort(-scores, kind="stable")
    areas = np.maximum(0.0, boxes[:, 2] - boxes[:, 0]) * np.maximum(0.0, boxes[:, 3] - boxes[:, 1])
    kept: list[int] = []
    while len(order):
        best = int(order[0])
        kept.append(best)
        rest = order[1:]
        top_left = np.maximum(boxes[best, 0:2], boxes[rest, 0:2])
        bottom_right = np.minimum(boxes[best, 2:4], boxes[rest, 2:4])
        intersection = np.prod(np.clip(bottom_right - top_left, 0.0, None), axis=1)
        iou = intersection / np.maximum(areas[best] + areas[rest] - intersection, 1e-9)
        order = rest[iou <= iou_threshold]
    return np.asarray(kept, np.int64)


def postprocess_detections(
    candidates: Candidates, nms_threshold: float, scale: float, frame_size: tuple[int, int]
) -> Detections:
    """NMS, then input px -> frame px (divide by the letterbox scale), boxes clipped to the frame."""
    if len(candidates.scores) == 0:
        return Detections.empty()
    kept = non_max_suppression(candidates.boxes, candidates.scores, nms_threshold)
    boxes = candidates.boxes[kept] / scale
    boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0.0, frame_size[0])
    boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0.0, frame_size[1])
    return Detections(
        boxes.astype(np.float32),
        candidates.scores[kept].astype(np.float32),
        (candidates.landmarks_5[kept] / scale).astype(np.float32),
    )


class Detector:
    """Runs one detector session; `detect_batch` feeds N same-size frames to one session run."""

    def __init__(
        self,
        session: ort.InferenceSession,
        spec: ModelSpec,
        *,
        input_size: InputSize = (640, 640),
        score_threshold: float | None = None,
        nms_threshold: float | None = None,
    ) -> None:
        if spec.role != "detector":
            raise ModelContractError(f"{spec.name} is a {spec.role}, not a detector")
        self._decode, defaults = decoder_for(spec.decoder)
        check_contract(session, spec)
        if input_size[0] % 32 or input_size[1] % 32:
            raise ModelContractError(f"detector input size {input_size} must be multiples of 32")
        self.spec = spec
        self.input_size = input_size
        self.score_threshold = defaults.score_threshold if score_threshold is None else score_threshold
        self.nms_threshold = defaults.nms_threshold if nms_threshold is None else nms_threshold
        self._session = session
        self._input_name = spec.inputs[0].name
        self._output_names = [tensor.name for tensor in spec.outputs]
        self._max_batch = fixed_batch_size(session)

    def forward(self, tensor: Any) -> dict[str, FloatArray]:
        """Run the session on [N,3,h,w] (NumPy, or CuPy bound in place); host outputs by name."""
        outputs = run_chunked_to_host(
            self._session, self._input_name, tensor, self._output_names, self._max_batch
        )
        return dict(zip(self._output_names, outputs))

    def detect(self, frame: Frame, *, input_size: InputSize | None = None) -> Detections:
        """Faces in one frame; `input_size` overrides the constructor's (e.g. lower res for tracking)."""
        return self.detect_batch([frame], input_size=input_size)[0]

    def detect_batch(
        self, frames: Sequence[Frame], *, input_size: InputSize | None = None
    ) -> list[Detections]:
        """Faces in each of N frames of the same size, with one session run."""
        if not frames:
            return []
        size = input_size or self.input_size
        if size[0] % 32 or size[1] % 32:
            raise ModelContractError(f"detector input size {size} must be multiples of 32")
        frame = frames[0]
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise InvalidFrameError(
                f"detector needs H x W x 3 uint8 RGB frames, got {frame.shape} {frame.dtype}"
            )
        frame_size = (int(frame.shape[1]), int(frame.shape[0]))
        scale = letterbox_scale(frame_size, size)
        outputs = self.forward(prepare_detector_input(frames, size, self.spec))
        results = []
        for index in range(len(frames)):
            per_image = {name: value[index] for name, value in outputs.items()}
            candidates = self._decode(per_image, size, self.score_threshold)
            results.append(postprocess_detections(candidates, self.nms_threshold, scale, frame_size))
        return results
