"""Identity embedder: a frame plus each face's 5 points in, one raw descriptor per face out.

The face is aligned to the spec's template with a 5-point similarity (dlib: 150 px chip, RGB 0..255,
the graph normalises; arcface: 112 px, (x - 127.5) / 127.5) and all faces run as one batch.
Output: float32 [N,D] exactly as the model gives it (dlib 128-d, arcface 512-d; not normalised).
"""

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray

from gpu_ops.affine import estimate_similarity
from gpu_ops.errors import InvalidFrameError
from models.errors import ModelContractError
from models.face import Frame
from models.inference import check_contract
from models.model_input import prepare_crops
from models.registry import ModelSpec
from models.session_io import fixed_batch_size, run_chunked_to_host

logger = logging.getLogger(__name__)

FloatArray = NDArray[np.float32]
Embeddings = NDArray[np.float32]


def alignment_matrices(
    landmarks_5: FloatArray, template: Sequence[tuple[float, float]]
) -> NDArray[np.float64]:
    """[N,2,3] frame -> chip matrices aligning each face's 5 points to the template."""
    target = np.asarray(template, np.float64)
    return np.stack([estimate_similarity(points, target) for points in np.asarray(landmarks_5)]).reshape(
        -1, 2, 3
    )


def prepare_chips(frame: Frame, landmarks_5: FloatArray, spec: ModelSpec) -> Any:
    """[N,3,S,S] float32 aligned chips in the spec's colour order and normalisation, on the frame's
    device (a CuPy frame gives CuPy chips, bound in place by `forward`)."""
    if spec.template is None or spec.input_size is None:
        raise ModelContractError(f"{spec.name} has no alignment template / input size")
    matrices = alignment_matrices(landmarks_5, spec.template)
    return prepare_crops([frame], np.zeros(len(matrices), np.intp), matrices, spec)


def identity_distance(a: NDArray[np.floating], b: NDArray[np.floating]) -> float:
    """Euclidean distance of two raw descriptors (dlib: same person below 0.6)."""
    return float(np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64)))


class Embedder:
    """Runs one embedder session over all faces of a frame in one batch."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec) -> None:
        if spec.role != "embedder" or spec.template is None or spec.input_size is None:
            raise ModelContractError(f"{spec.name} is not an embedder with an alignment template")
        check_contract(session, spec)
        self.spec = spec
        self.dimensions = int(spec.outputs[0].shape[-1] or 0)
        self._session = session
        self._input_name = spec.inputs[0].name
        self._output_name = spec.outputs[0].name
        self._max_batch = fixed_batch_size(session)

    def prepare_chips(self, frame: Frame, landmarks_5: FloatArray) -> Any:
        """The model input for these faces: [N,3,S,S] float32."""
        return prepare_chips(frame, landmarks_5, self.spec)

    def forward(self, tensor: Any) -> Embeddings:
        """Run the session (NumPy, or CuPy bound in place), in chunks of the file's fixed batch size."""
        (embeddings,) = run_chunked_to_host(
            self._session, self._input_name, tensor, [self._output_name], self._max_batch
        )
        return embeddings.astype(np.float32)

    def embed(self, frame: Frame, landmarks_5: FloatArray) -> Embeddings:
        """[N,D] descriptors of the faces given by their 5 points [N,5,2] (frame px)."""
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise InvalidFrameError(
                f"embedder needs H x W x 3 uint8 RGB frames, got {frame.shape} {frame.dtype}"
            )
        if len(landmarks_5) == 0:
            return np.zeros((0, self.dimensions), np.float32)
        return self.forward(self.prepare_chips(frame, landmarks_5))
