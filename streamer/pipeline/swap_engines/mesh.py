"""The mesh swap engine: the source face's texture warped onto each target face's 468-point mesh.

Per face and frame: one remap field over the face box (gpu_ops.mesh_warp: no cracks, one sample of
colour + paste mask), with `mouth_mask` the target's eyes and inner mouth kept, the target's lips
kept when its mouth is much more open than the source's (closed lips stretched over a grin look
wrong), the target's low-frequency shading applied (gpu_ops.color_transfer), then a blend that writes
only inside the face box. Everything about the source is prepared once (mesh_source.py).
Works with the permissive models: any detector with 5 points and the facemesh_468 landmarker.
"""

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import get_array_module, is_device_array
from gpu_ops.color_transfer import match_shading, transfer_lab_statistics
from gpu_ops.errors import InvalidInputError
from gpu_ops.masks import blend, fill_polygons
from gpu_ops.mesh_warp import apply_remap, build_remap
from models import face_mesh_topology as topology
from models.detector import Detector
from models.face import Frame, TrackedFace
from models.landmarks import Landmarker
from streamer.pipeline.stage_timer import StageTimer
from streamer.pipeline.swap_engines.base import EngineName, NoFaceError, SourceFace, SwapOptions
from streamer.pipeline.swap_engines.mesh_source import (
    MeshSource,
    MeshSourceConfig,
    TextureName,
    build_mesh_source,
    mouth_openness,
)

logger = logging.getLogger(__name__)

ShadingMethod = Literal["low_frequency", "lab", "none"]
SHADING_METHODS: tuple[ShadingMethod, ...] = get_args(ShadingMethod)
PasteBox = tuple[int, int, int, int]  # x1, y1, x2, y2 (exclusive), frame px

MIN_FACE_PRESENCE = 0.5


@dataclass(frozen=True)
class MeshConfig:
    """Engine switches. Every quality fix can be turned off, which is how docs/images shows 'before'."""

    source: MeshSourceConfig = field(default_factory=MeshSourceConfig)
    shading: ShadingMethod = "low_frequency"
    shading_cells_across: float = 4.0  # coarse grid cells across the face box (finer: beards fade)
    keep_target_lips: bool = True
    lips_open_difference: tuple[float, float] = (0.2, 0.35)  # target - source openness: start, full


class MeshEngine:
    """SwapEngine for the mesh method; stateless per frame, so one instance serves many streams."""

    name: EngineName = "mesh"

    def __init__(self, detector: Detector, landmarker: Landmarker, config: MeshConfig | None = None) -> None:
        self.detector = detector
        self.landmarker = landmarker
        self.config = config or MeshConfig()
        self.timer = StageTimer()  # per-face "warp" and "blend" times, read by the bench
        if self.config.shading not in SHADING_METHODS:
            raise InvalidInputError(f"unknown shading {self.config.shading!r}; choose from {SHADING_METHODS}")

    def source_mesh(self, image: Frame) -> NDArray[np.float32]:
        """The 468-point mesh of the largest face in a photo; NoFaceError when there is none."""
        detections = self.detector.detect(image)
        if len(detections) == 0:
            raise NoFaceError("no face found in the source image")
        boxes = detections.boxes
        largest = int(np.argmax((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])))
        landmarks = self.landmarker.detect(
            image, detections.landmarks_5[largest : largest + 1], boxes[largest : largest + 1]
        )
        if len(landmarks) == 0 or float(landmarks.presence[0]) < MIN_FACE_PRESENCE:
            raise NoFaceError("the source face could not be meshed (face landmarks not found)")
        return np.asarray(landmarks.points[0], np.float32)

    def prepare_source(self, image: Frame) -> MeshSource:
        """Texture, mesh and masks of the source photo's largest face, computed once."""
        return build_mesh_source(image, self.source_mesh(image), self.config.source)

    def swap(
        self, frame: Frame, faces: Sequence[TrackedFace], source: SourceFace, options: SwapOptions
    ) -> Frame:
        """A copy of `frame` with every meshed face swapped; faces without a mesh are left alone."""
        if not isinstance(source, MeshSource):
            raise InvalidInputError(f"the mesh engine needs a MeshSource, got {type(source).__name__}")
        output = frame.copy()
        for face in faces:
            if face.mesh is not None:
                self.swap_face(output, face.mesh, source, options)
        return output

    def swap_face(
        self, frame: Frame, mesh: NDArray[np.float32], source: MeshSource, options: SwapOptions
    ) -> PasteBox:
        """Swap one face in place; only pixels inside the returned box may change."""
        box = paste_box(mesh, frame.shape[1], frame.shape[0])
        x1, y1, x2, y2 = box
        if x2 - x1 < 2 or y2 - y1 < 2:
            return box
        started = time.perf_counter()
        origin = np.array([x1, y1], np.float32)
        dst_triangles = mesh[topology.ALL_TRIANGLES, :2] - origin
        on_device = is_device_array(frame)  # CuPy frame: field, warp, masks and blend stay on the device
        field_ = build_remap(dst_triangles, source.src_triangles, (x2 - x1, y2 - y1), on_device=on_device)
        texture_name: TextureName = "texture_features_cut" if options.mouth_mask else "texture"
        texture = source.pixels_on_device(texture_name) if on_device else getattr(source, texture_name)
        warped = apply_remap(texture, field_)
        patch = get_array_module(warped).ascontiguousarray(warped[..., :3])
        alpha = warped[..., 3].astype(np.float32) * np.float32(1.0 / 255.0)
        if options.mouth_mask:
            # the soft cut travels with the texture; this hard zero covers target pixels inside the
            # inner-lip outline that the mesh gives to a curled lip triangle (mouth corners)
            inner_mouth = fill_polygons(
                (x2 - x1, y2 - y1), [mesh[list(topology.LIPS_INNER), :2] - origin], on_device=on_device
            )
            alpha[inner_mouth > 0] = 0.0
        lips_weight = self.lips_weight(mesh, source)
        if lips_weight > 0.0:
            lips_mask = source.pixels_on_device("lips_mask") if on_device else source.lips_mask
            lips = apply_remap(lips_mask, field_).astype(np.float32) * np.float32(1.0 / 255.0)
            alpha *= 1.0 - lips_weight * lips
        region = frame[y1:y2, x1:x2]
        warped_at = time.perf_counter()
        patch = self.relight(patch, region, alpha)
        blend(region, patch, alpha)
        self.timer.record("warp", warped_at - started)
        self.timer.record("blend", time.perf_counter() - warped_at)
        return box

    def lips_weight(self, mesh: NDArray[np.float32], source: MeshSource) -> float:
        """How much of the target's own lips to keep (0..1), from how much wider its mouth is open."""
        if not self.config.keep_target_lips:
            return 0.0
        start, full = self.config.lips_open_difference
        difference = mouth_openness(mesh) - source.mouth_openness
        return float(np.clip((difference - start) / max(full - start, 1e-3), 0.0, 1.0))

    def relight(self, patch: Frame, region: Frame, alpha: NDArray[np.float32]) -> Frame:
        """The warped source patch with the target's light and tone (the configured method)."""
        if self.config.shading == "none":
            return patch
        if self.config.shading == "lab":
            return transfer_lab_statistics(patch, region, alpha)  # type: ignore[no-any-return]
        cell_px = max(4.0, patch.shape[1] / self.config.shading_cells_across)
        return match_shading(patch, region, alpha, cell_px=cell_px)  # type: ignore[no-any-return]


def paste_box(mesh: NDArray[np.float32], frame_width: int, frame_height: int) -> PasteBox:
    """The integer box (x2, y2 exclusive) holding every mesh point plus a 1-px rim, inside the frame."""
    low = np.floor(mesh[:, :2].min(axis=0)) - 1
    high = np.ceil(mesh[:, :2].max(axis=0)) + 2
    x1, y1 = int(max(0, low[0])), int(max(0, low[1]))
    x2, y2 = int(min(frame_width, high[0])), int(min(frame_height, high[1]))
    return x1, y1, max(x1, x2), max(y1, y2)


__all__ = ["MeshConfig", "MeshEngine", "MeshSource", "NoFaceError", "paste_box"]
