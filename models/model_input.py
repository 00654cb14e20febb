"""Model input tensors cut straight from frames: aligned crops normalised as a model's spec says.

Every model role that works on aligned faces (embedder, landmarker, swapper, enhancer) builds its input
here, so the batched crop op (one launch on the GPU) is the only path from frames to a model.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpu_ops.affine_crop import crop_faces
from models.errors import ModelContractError
from models.face import Frame
from models.registry import ModelSpec


def prepare_crops(
    frames: Sequence[Frame],
    frame_index: NDArray[np.intp],
    affine_matrices: NDArray[np.floating[Any]],
    spec: ModelSpec,
) -> NDArray[np.float32]:
    """Model input [N,3,h,w] for the faces of many frames, normalised as `spec` says (one batched crop)."""
    if spec.input_size is None:
        raise ModelContractError(f"{spec.name} has no fixed input size")
    return crop_faces(
        frames,
        frame_index,
        affine_matrices,
        spec.input_size,
        scale=spec.scale,
        mean=spec.mean,
        std=spec.std,
        swap_rb=spec.color_order == "bgr",
        layout=spec.layout,
    )
