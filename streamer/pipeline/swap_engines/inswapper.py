"""The inswapper engine: ArcFace identity -> inswapper_128 on aligned 128-px crops -> soft paste-back.

The source latent is computed once per source photo. Per frame, every face of every frame in a batch is
cropped in one batched op, swapped in as few session calls as the model allows (one when its batch dim
is symbolic, see models.batch_conversion), optionally restored by GFPGAN every `enhance_every` batches,
and pasted back through a mask built once in crop space (times the target's inner mouth, from its face
mesh, when `mouth_mask` is on and a mesh was tracked). Output frames are copies: the input frames are
never written, and a copy differs from its input only inside the faces' paste boxes.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

from gpu_ops.affine import transform_points
from gpu_ops.backend import get_array_module, is_device_array
from gpu_ops.errors import InvalidInputError
from gpu_ops.masks import feather_outside_cpu, fill_polygons_cpu
from gpu_ops.paste_back import paste_back
from models.enhancer import Enhancer
from models.face import Frame, TrackedFace
from models.face_mesh_topology import LIPS_INNER
from models.inference import InferenceConfig
from models.model_files import ModelStore
from models.model_input import prepare_crops
from models.swapper import (
    Swapper,
    extract_emap,
    face_alignments,
    feathered_box_mask,
    postprocess_swapped,
)
from streamer.pipeline.swap_engines.base import EngineName, NoFaceError, SourceFace, SwapOptions

logger = logging.getLogger(__name__)

ARCFACE_MODEL = "arcface_w600k_r50"


class FaceDetections(Protocol):
    @property
    def boxes(self) -> NDArray[np.float32]: ...

    @property
    def landmarks_5(self) -> NDArray[np.float32]: ...

    def __len__(self) -> int: ...


class FaceDetector(Protocol):
    def detect(self, frame: Frame) -> FaceDetections: ...


class FaceEmbedder(Protocol):
    def embed(self, frame: Frame, landmarks_5: NDArray[np.float32]) -> NDArray[np.float32]: ...


class ModelChoice(Protocol):
    """The two names `from_store` reads (the pipeline's config has them)."""

    @property
    def swapper_model(self) -> str: ...

    @property
    def enhancer_model(self) -> str: ...


def inner_mouth_mask(
    mesh: NDArray[np.float32], affine_matrix: NDArray[np.float32], size: tuple[int, int]
) -> NDArray[np.float32]:
    """[h,w] in crop space: 1 inside the target's inner lips (face mesh), feathered 2 px outward.

    Built per face in the 128-px crop (cheap), never blurred in frame space; `1 - mask` keeps the
    target's own open mouth, so speech stays visible through the swapped face.
    """
    lips = np.asarray(transform_points(mesh[list(LIPS_INNER), :2], affine_matrix), dtype=np.float32)
    region = fill_polygons_cpu(size, [lips])
    if not region.any():  # closed mouth: the polygon has no area
        return np.zeros((size[1], size[0]), dtype=np.float32)
    return feather_outside_cpu(region, 0.5, 2.0)


@dataclass(frozen=True, eq=False)
class InswapperSource:
    """The identity of one source photo: raw arcface embedding [512] and the swapper latent [512]."""

    embedding: NDArray[np.float32]
    latent: NDArray[np.float32]
    landmarks_5: NDArray[np.float32]  # [5,2] of the chosen face in the source photo
    engine: EngineName = "inswapper"


class SwapItem(NamedTuple):
    """One frame of a batch and what to do with it (plain tuples in this order work too)."""

    frame: Frame
    faces: Sequence[TrackedFace]
    source: SourceFace
    options: SwapOptions


class InswapperEngine:
    """SwapEngine for inswapper_128 (+ fp16); see the module docstring."""

    name: EngineName = "inswapper"

    def __init__(
        self,
        detector: FaceDetector,
        embedder_arcface: FaceEmbedder,
        swapper: Swapper,
        enhancer: Enhancer | None = None,
        *,
        enhance_every: int = 1,
        enhance_blend: float = 1.0,
    ) -> None:
        if enhance_every < 1:
            raise InvalidInputError(f"enhance_every must be >= 1, got {enhance_every}")
        if swapper.spec.input_size is None:
            raise InvalidInputError(f"{swapper.spec.name} has no fixed input size")
        self.detector = detector
        self.embedder = embedder_arcface
        self.swapper = swapper
        self.enhancer = enhancer
        self.enhance_every = enhance_every
        self.enhance_blend = enhance_blend
        self._crop_size = swapper.spec.input_size
        self.crop_mask = feathered_box_mask(swapper.spec.input_size)
        self._device_crop_mask: Any = None
        self._batches_seen = 0
        self._warned_no_enhancer = False

    @classmethod
    def from_store(
        cls,
        store: ModelStore,
        inference: InferenceConfig,
        detector: FaceDetector,
        config: ModelChoice,
        *,
        cache_dir: Path | None = None,
    ) -> "InswapperEngine":
        """Load the swapper (batched copy), arcface and, when its file is present, the enhancer."""
        from models.embedder import Embedder  # the face-analysis module; imported where it is needed

        swapper_session = store.batched_session(config.swapper_model, inference, cache_dir)
        swapper_path = store.path(config.swapper_model)  # the verified original holds the emap
        swapper = Swapper(swapper_session, store.spec(config.swapper_model), extract_emap(swapper_path))
        embedder = Embedder(store.session(ARCFACE_MODEL, inference), store.spec(ARCFACE_MODEL))
        enhancer = None
        if store.is_available(config.enhancer_model):
            enhancer_session = store.batched_session(config.enhancer_model, inference, cache_dir)
            enhancer = Enhancer(enhancer_session, store.spec(config.enhancer_model))
        else:
            logger.info("enhancer %s not present: inswapper runs without it", config.enhancer_model)
        return cls(detector, embedder, swapper, enhancer)

    @staticmethod
    def required_models(swapper_name: str = "inswapper_128") -> tuple[str, ...]:
        """Registry names this engine cannot run without (the enhancer is optional)."""
        return (swapper_name, ARCFACE_MODEL)

    def prepare_source(self, image: Frame) -> InswapperSource:
        """Embed the largest face of `image` and derive its latent; NoFaceError when there is none."""
        detections = self.detector.detect(image)
        if len(detections) == 0:
            raise NoFaceError("no face found in the source image")
        boxes = np.asarray(detections.boxes, dtype=np.float32)
        areas = np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)
        chosen = int(np.argmax(areas))
        landmarks_5 = np.asarray(detections.landmarks_5[chosen : chosen + 1], dtype=np.float32)
        embedding = np.asarray(self.embedder.embed(image, landmarks_5)[0], dtype=np.float32)
        latent = self.swapper.source_latent(embedding)
        logger.info(
            "inswapper source prepared: face %d of %d, box %s", chosen, len(detections), boxes[chosen]
        )
        return InswapperSource(embedding=embedding, latent=latent, landmarks_5=landmarks_5[0])

    def swap(
        self, frame: Frame, faces: Sequence[TrackedFace], source: SourceFace, options: SwapOptions
    ) -> Frame:
        """A copy of `frame` with every face in `faces` swapped to `source`."""
        return self.swap_batch([SwapItem(frame, faces, source, options)])[0]

    def swap_batch(
        self, items: Sequence[SwapItem | tuple[Frame, Sequence[TrackedFace], SourceFace, SwapOptions]]
    ) -> list[Frame]:
        """Swap all faces of many frames with one batched crop and as few swapper calls as possible."""
        batch = [SwapItem(*item) for item in items]
        outputs = [get_array_module(item.frame).array(item.frame, copy=True, order="C") for item in batch]
        frame_index: list[int] = []
        landmarks: list[NDArray[np.float32]] = []
        latents: list[NDArray[np.float32]] = []
        enhance_flags: list[bool] = []
        kept_mouths: list[NDArray[np.float32] | None] = []  # target meshes whose inner mouth stays
        for index, item in enumerate(batch):
            latent = self._latent_of(item.source)
            for face in item.faces:
                frame_index.append(index)
                landmarks.append(np.asarray(face.landmarks_5, dtype=np.float32))
                latents.append(latent)
                enhance_flags.append(item.options.enhance)
                kept_mouths.append(face.mesh if item.options.mouth_mask else None)
        enhance_now = self.enhancer is not None and self._batches_seen % self.enhance_every == 0
        self._batches_seen += 1
        if not frame_index:
            return outputs
        indices = np.asarray(frame_index, dtype=np.intp)
        landmarks_5 = np.stack(landmarks)
        affine_matrices = face_alignments(landmarks_5, self.swapper.spec)
        crops = prepare_crops([item.frame for item in batch], indices, affine_matrices, self.swapper.spec)
        swapped = postprocess_swapped(self.swapper.swap_crops(crops, np.stack(latents)))
        box_mask = self._crop_mask_like(outputs[0])
        xp = get_array_module(outputs[0])
        for index, crop, matrix, mesh in zip(indices, swapped, affine_matrices, kept_mouths):
            mask = box_mask
            if mesh is not None:
                mask = box_mask * xp.asarray(1.0 - inner_mouth_mask(mesh, matrix, self._crop_size))
            paste_back(outputs[int(index)], crop, matrix, mask)
        if any(enhance_flags) and self.enhancer is None and not self._warned_no_enhancer:
            logger.warning("enhancement asked for but no enhancer is loaded: faces are swapped only")
            self._warned_no_enhancer = True
        if enhance_now and self.enhancer is not None and any(enhance_flags):
            selected = np.asarray(enhance_flags, dtype=bool)
            self.enhancer.enhance_faces(
                outputs, indices[selected], landmarks_5[selected], blend=self.enhance_blend
            )
        return outputs

    def _crop_mask_like(self, frame: Any) -> Any:
        """The paste mask on the frame's device (uploaded once for CuPy frames)."""
        if not is_device_array(frame):
            return self.crop_mask
        if self._device_crop_mask is None:
            self._device_crop_mask = get_array_module(frame).asarray(self.crop_mask)
        return self._device_crop_mask

    def _latent_of(self, source: SourceFace) -> NDArray[np.float32]:
        if not isinstance(source, InswapperSource):
            raise InvalidInputError(
                f"source prepared by the {source.engine!r} engine cannot drive the inswapper engine"
            )
        return source.latent
