"""GFPGAN 1.4 face restoration, pasted back over the (swapped) face.

Input: `input` float32 [N,3,512,512] RGB, (x/255 - 0.5)/0.5, a 5-point similarity crop on the FFHQ-512
template. Output: `output`, same shape, RGB in [-1,1]. The file fixes N=1; a dynamic-batch copy
(`models.batch_conversion`) lets all faces of many frames run in one call. The restored crop is blended
back through a soft mask built once in crop space, scaled by `blend` (1 = restored face only).
"""

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort
from numpy.typing import NDArray

from gpu_ops.backend import get_array_module, is_device_array
from gpu_ops.paste_back import paste_back
from models.errors import ModelContractError
from models.face import Frame
from models.inference import check_contract
from models.model_input import prepare_crops
from models.registry import ModelSpec
from models.session_io import run_to_device
from models.swapper import face_alignments, feathered_box_mask

logger = logging.getLogger(__name__)

Box = tuple[int, int, int, int]


def postprocess_enhanced(output: NDArray[np.floating]) -> NDArray[np.uint8]:
    """Enhancer output [N,3,h,w] RGB in [-1,1] -> uint8 RGB crops [N,h,w,3] (NumPy or CuPy, as given)."""
    xp = get_array_module(output)
    pixels = (xp.clip(xp.asarray(output, dtype=xp.float32), -1.0, 1.0) + 1.0) * 127.5
    return xp.ascontiguousarray(xp.rint(pixels).astype(xp.uint8).transpose(0, 2, 3, 1))  # type: ignore[no-any-return]


class Enhancer:
    """Runs a GFPGAN-like session over face crops, one call per batch when the batch dim is symbolic."""

    def __init__(self, session: ort.InferenceSession, spec: ModelSpec) -> None:
        check_contract(session, spec)
        if spec.input_size is None or spec.template is None:
            raise ModelContractError(f"{spec.name}: an enhancer needs a fixed input size and a template")
        self.session = session
        self.spec = spec
        first = session.get_inputs()[0].shape[0]
        self.fixed_batch: int | None = first if isinstance(first, int) else None
        self._input_name = spec.inputs[0].name
        self._output_name = spec.outputs[0].name
        self.crop_mask = feathered_box_mask(spec.input_size, margin_fraction=0.08, feather_fraction=0.12)
        self._device_mask: Any = None

    @property
    def supports_batch(self) -> bool:
        return self.fixed_batch is None

    def forward(self, batch: NDArray[np.float32]) -> NDArray[np.float32]:
        """One session run; the batch must fit the session. CuPy batches stay on the device."""
        return run_to_device(self.session, {self._input_name: batch}, self._output_name, tuple(batch.shape))  # type: ignore[no-any-return]

    def enhance_crops(self, batch: NDArray[np.float32]) -> NDArray[np.uint8]:
        """Restored uint8 crops [N,h,w,3] for a prepared batch [N,3,h,w] (fixed-batch sessions: per face)."""
        xp = get_array_module(batch)
        if len(batch) == 0:
            height, width = batch.shape[2:]
            return xp.zeros((0, height, width, 3), dtype=xp.uint8)  # type: ignore[no-any-return]
        step = self.fixed_batch or len(batch)
        outputs = [self.forward(batch[start : start + step]) for start in range(0, len(batch), step)]
        return postprocess_enhanced(xp.concatenate(outputs))

    def enhance_faces(
        self,
        frames: Sequence[Frame],
        frame_index: NDArray[np.intp],
        landmarks_5: NDArray[np.float32],
        *,
        blend: float = 1.0,
    ) -> list[Box]:
        """Restore every face (its 5 points, frame it belongs to) in place; returns each face's paste box.

        Frames are modified only inside the returned boxes. `blend` in [0,1] scales the paste mask.
        """
        if not 0.0 <= blend <= 1.0:
            raise ModelContractError(f"enhancer blend must be in [0, 1], got {blend}")
        if len(landmarks_5) == 0 or blend == 0.0:
            return []
        affine_matrices = face_alignments(landmarks_5, self.spec)
        batch = prepare_crops(frames, frame_index, affine_matrices, self.spec)
        restored = self.enhance_crops(batch)
        mask: Any = self.crop_mask
        if is_device_array(frames[0]):
            if self._device_mask is None:  # uploaded once, like the model weights
                self._device_mask = get_array_module(frames[0]).asarray(self.crop_mask)
            mask = self._device_mask
        if blend != 1.0:
            mask = mask * np.float32(blend)
        return [
            paste_back(frames[int(index)], crop, matrix, mask)
            for index, crop, matrix in zip(frame_index, restored, affine_matrices)
        ]
