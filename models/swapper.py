"""inswapper_128: swaps the identity of aligned 128-px face crops to a source latent.

Input: `target` float32 [N,3,128,128] RGB in [0,1] (5-point similarity crop on INSWAPPER_128_TEMPLATE) and
`source` float32 [N,512], the source latent = l2norm(l2norm(arcface embedding) @ emap), where `emap` is the
file's LAST initializer (512x512), computed once per source. Output: `output` [N,3,128,128] RGB in [0,1].
The file fixes N=1; a copy from `models.batch_conversion` takes any N, and `Swapper` uses one call then.
"""

import logging
from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime as ort
from numpy.typing import NDArray
from onnx import numpy_helper

from gpu_ops.affine import estimate_similarity
from gpu_ops.backend import get_array_module
from models.errors import ModelContractError
from models.inference import check_contract
from models.registry import ModelSpec
from models.session_io import fixed_batch_size, run_to_device

logger = logging.getLogger(__name__)

Latent = NDArray[np.float32]  # [512] or [N,512]
EMAP_SIZE = 512
BATCH_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16)


def extract_emap(model_path: Path) -> NDArray[np.float32]:
    """The 512x512 `emap` stored as the model's last initializer (as insightface reads it), as float32."""
    model = onnx.load(str(model_path), load_external_data=False)
    if not model.graph.initializer:
        raise ModelContractError(
            f"{model_path.name}: no initializers, so no emap; is this an inswapper file?"
        )
    last = model.graph.initializer[-1]
    emap = numpy_helper.to_array(last).astype(np.float32)
    if emap.shape != (EMAP_SIZE, EMAP_SIZE):
        raise ModelContractError(
            f"{model_path.name}: last initializer {last.name!r} has shape {emap.shape}, "
            f"expected the ({EMAP_SIZE}, {EMAP_SIZE}) emap; is this an inswapper file?"
        )
    return np.ascontiguousarray(emap)


def _l2_normalise(rows: NDArray[np.float32]) -> NDArray[np.float32]:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    if np.any(norms == 0):
        raise ModelContractError("cannot normalise an all-zero embedding or latent")
    return (rows / norms).astype(np.float32)


def source_latent(embedding: NDArray[np.float32], emap: NDArray[np.float32]) -> Latent:
    """insightface's latent: l2norm(embedding) @ emap, l2-normalised again. [512] -> [512], [N,512] -> [N,512]."""
    embedding = np.asarray(embedding, dtype=np.float32)
    if embedding.shape[-1] != emap.shape[0]:
        raise ModelContractError(f"embedding has {embedding.shape[-1]} dims; emap expects {emap.shape[0]}")
    return _l2_normalise(_l2_normalise(embedding) @ emap)


def face_alignments(landmarks_5: NDArray[np.float32], spec: ModelSpec) -> NDArray[np.float32]:
    """Affine matrices [N,2,3] (frame -> crop) mapping each face's 5 points onto `spec.template`."""
    if spec.template is None:
        raise ModelContractError(f"{spec.name} has no alignment template")
    template = np.asarray(spec.template, dtype=np.float32)
    points = np.asarray(landmarks_5, dtype=np.float32).reshape(-1, 5, 2)
    if len(points) == 0:
        return np.zeros((0, 2, 3), dtype=np.float32)
    return np.asarray(estimate_similarity(points, template), dtype=np.float32).reshape(-1, 2, 3)


def postprocess_swapped(output: NDArray[np.floating]) -> NDArray[np.uint8]:
    """Swapper output [N,3,h,w] RGB [0,1] -> uint8 RGB crops [N,h,w,3] (NumPy or CuPy, as given)."""
    xp = get_array_module(output)
    pixels = xp.clip(xp.asarray(output, dtype=xp.float32) * 255.0, 0.0, 255.0)
    return xp.ascontiguousarray(xp.rint(pixels).astype(xp.uint8).transpose(0, 2, 3, 1))  # type: ignore[no-any-return]


def feathered_box_mask(
    size: tuple[int, int], *, margin_fraction: float = 0.1, feather_fraction: float = 0.1
) -> NDArray[np.float32]:
    """Soft paste mask [h,w] in [0,1], built once in crop space: box eroded by a margin, edges feathered.

    The crop's border holds warp padding and the swapper's weakest pixels, so the mask is 0 within the
    margin and rises smoothly (smoothstep over `feather_fraction` of the size) to exactly 1 inside.
    """
    width, height = size
    inside = np.zeros((height, width), dtype=np.uint8)
    margin_x, margin_y = round(width * margin_fraction), round(height * margin_fraction)
    inside[margin_y : height - margin_y, margin_x : width - margin_x] = 1
    feather = max(1.0, min(width, height) * feather_fraction)
    distance = cv2.distanceTransform(inside, cv2.DIST_L2, cv2.DIST_MASK_PRECISE)  # px to the box edge
    ramp = np.clip(distance / feather, 0.0, 1.0)
    mask = (ramp * ramp * (3.0 - 2.0 * ramp)).astype(np.float32)  # smoothstep: no visible seam
    return np.ascontiguousarray(mask)


class Swapper:
    """Runs an inswapper session; batches in one call when the session's batch dim is symbolic."""

    def __init__(
        self,
        session: ort.InferenceSession,
        spec: ModelSpec,
        emap: NDArray[np.float32],
        *,
        batch_buckets: tuple[int, ...] = BATCH_BUCKETS,
    ) -> None:
        check_contract(session, spec)
        if emap.shape != (EMAP_SIZE, EMAP_SIZE):
            raise ModelContractError(f"{spec.name}: emap shape {emap.shape}, expected (512, 512)")
        self.session = session
        self.spec = spec
        self.emap = np.ascontiguousarray(emap, dtype=np.float32)
        self.fixed_batch = fixed_batch_size(session)
        self.batch_buckets = tuple(sorted(batch_buckets))
        self._target_name, self._source_name = spec.inputs[0].name, spec.inputs[1].name
        self._output_name = spec.outputs[0].name

    @property
    def supports_batch(self) -> bool:
        """True when the session takes any number of faces in one call (symbolic dim 0)."""
        return self.fixed_batch is None

    def source_latent(self, embedding: NDArray[np.float32]) -> Latent:
        """The latent for a raw arcface embedding [512] or [N,512]; see `source_latent`."""
        return source_latent(embedding, self.emap)

    def forward(self, target: NDArray[np.float32], source: NDArray[np.float32]) -> NDArray[np.float32]:
        """One session run; shapes must already fit the session. CuPy targets stay on the device."""
        inputs = {self._target_name: target, self._source_name: source}
        return run_to_device(self.session, inputs, self._output_name, tuple(target.shape))  # type: ignore[no-any-return]

    def _chunk_size(self, remaining: int) -> int:
        if self.fixed_batch is not None:
            return self.fixed_batch
        fitting = [bucket for bucket in self.batch_buckets if bucket >= remaining]
        return fitting[0] if fitting else self.batch_buckets[-1]

    def swap_crops(self, target: NDArray[np.float32], latents: Latent) -> NDArray[np.float32]:
        """Swapper output [N,3,h,w] for N crops and N latents: one call per bucket-sized chunk.

        With a symbolic batch, chunks are padded to the next bucket size (1/2/4/8/16) so the session sees
        a few shapes only; a fixed-batch session runs its fixed size at a time.
        """
        count = len(target)
        if len(latents) != count:
            raise ModelContractError(f"{count} crops but {len(latents)} latents")
        xp = get_array_module(target)
        results: list[NDArray[np.float32]] = []
        start = 0
        while start < count:
            chunk = self._chunk_size(count - start)
            stop = min(start + chunk, count)
            target_chunk, latent_chunk = target[start:stop], latents[start:stop]
            padding = chunk - (stop - start)
            if padding:
                target_chunk = xp.concatenate([target_chunk, xp.zeros_like(target[:1]).repeat(padding, 0)])
                latent_chunk = np.concatenate([latent_chunk, np.repeat(latents[:1], padding, 0)])
            results.append(self.forward(target_chunk, latent_chunk)[: stop - start])
            start = stop
        if not results:
            height, width = target.shape[2:]
            return xp.zeros((0, 3, height, width), dtype=xp.float32)  # type: ignore[no-any-return]
        return xp.concatenate(results)  # type: ignore[no-any-return]
