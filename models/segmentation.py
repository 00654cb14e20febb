"""Person segmentation (MediaPipe selfie): which pixels of a frame belong to a person at all.

The occlusion mask of the mesh engine uses it for the outline: what the person mask calls background
inside a face hull (a wall seen past a turned jaw, a held object's far side) is not the face. It does
not tell a face from a hand or a microphone held by the person (they are all "person").
selfie_seg_256 / selfie_seg_landscape: NHWC RGB /255, the whole frame stretched to the input size (no
letterbox, as MediaPipe's graph does); the output is a person probability (sigmoid inside the model),
resized back to the frame here.
"""

import logging
from typing import Any

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


def preprocess_selfie(frame: NDArray[np.uint8], input_size: tuple[int, int]) -> NDArray[np.float32]:
    """[1, H, W, 3] float32 in [0, 1]: the RGB frame stretched to (width, height) = `input_size`."""
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise InvalidFrameError(
            f"segmenter needs an H x W x 3 uint8 RGB frame, got {frame.shape} {frame.dtype}"
        )
    resized = cv2.resize(frame, input_size, interpolation=cv2.INTER_AREA)
    return (resized.astype(np.float32) * np.float32(1.0 / 255.0))[None]


def postprocess_selfie(output: Any, frame_size: tuple[int, int]) -> NDArray[np.float32]:
    """The [1, h, w, 1] probability resized (bilinear) to the frame's (width, height), clipped to [0, 1]."""
    probability = np.asarray(output, np.float32).reshape(output.shape[1], output.shape[2])
    resized = cv2.resize(probability, frame_size, interpolation=cv2.INTER_LINEAR)
    return np.clip(resized, 0.0, 1.0).astype(np.float32)


class PersonSegmenter:
    """Runs one selfie-segmentation session per frame."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec) -> None:
        if spec.role != "segmenter" or spec.input_size is None:
            raise ModelContractError(f"{spec.name} is not a segmentation model with a fixed input size")
        check_contract(session, spec)
        self.spec = spec
        self._session = session
        self._input_name = spec.inputs[0].name
        self._output_name = spec.outputs[0].name

    def person_probability(self, frame: Frame) -> NDArray[np.float32]:
        """Float32 H x W person probability of the frame (device frames are copied to the host)."""
        host = to_host(frame)
        assert self.spec.input_size is not None
        tensor = preprocess_selfie(host, self.spec.input_size)
        (output,) = self._session.run([self._output_name], {self._input_name: tensor})
        return postprocess_selfie(output, (host.shape[1], host.shape[0]))
