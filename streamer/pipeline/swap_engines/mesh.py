"""The mesh swap engine: the source face's texture warped onto each target face's 468-point mesh.

Per face and frame: one remap field over the face box (gpu_ops.mesh_warp: no cracks, one sample of
colour + paste mask, one of the blend's level masks), with `mouth_mask` the target's eyes and inner
mouth kept, the target's lips kept when its mouth is much more open than the source's (closed lips
stretched over a grin look wrong), the target's own dark rim inside the outline kept (gpu_ops.rim_guard:
background past a jaw, the shadow under a chin), the target's low-frequency shading applied
(gpu_ops.color_transfer), then a multi-band blend (gpu_ops.multiband_blend: no visible edge) that writes
only inside the face box.
With the stream's memory (SwapOptions.memory) the shading statistics and the lips weight are smoothed
per face track (mesh_memory.py). Everything about the source is prepared once (mesh_source.py).
Works with the permissive models: any detector with 5 points and the facemesh_468 landmarker.
"""

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import get_array_module, is_device_array
from gpu_ops.color_transfer import apply_shading_ratio, shading_grid, shading_ratio, transfer_lab_statistics
from gpu_ops.errors import InvalidInputError
from gpu_ops.masks import blend, fill_polygons
from gpu_ops.mesh_warp import apply_remap, color_channels
from gpu_ops.multiband_blend import mask_planes, multiband_blend
from gpu_ops.occlusion_mask import show_weight
from gpu_ops.rim_guard import rim_guard
from gpu_ops.working_resolution import composite_working_resolution, shrink
from models import face_mesh_topology as topology
from models.detector import Detector
from models.face import Frame, TrackedFace
from models.landmarks import Landmarker
from streamer.pipeline.stage_timer import StageTimer
from streamer.pipeline.swap_engines.base import (
    EngineName,
    NoFaceError,
    SourceFace,
    StreamMemory,
    SwapOptions,
)
from streamer.pipeline.swap_engines.mesh_geometry import FaceGeometry, PasteBox, face_geometry, paste_box
from streamer.pipeline.swap_engines.mesh_hands import FaceHands
from streamer.pipeline.swap_engines.mesh_memory import (
    MeshMemory,
    Smoothing,
    TrackMemory,
    smooth_lips_weight,
    smooth_shading_ratio,
)
from streamer.pipeline.swap_engines.mesh_occlusion import Occlusion, OcclusionThresholds, face_occlusion
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
BlendMethod = Literal["multiband", "feather"]
BLEND_METHODS: tuple[BlendMethod, ...] = get_args(BlendMethod)

MIN_FACE_PRESENCE = 0.5
COVERED_FADE = 0.5  # a track whose swap shows less than this is covered (the tracker holds it)


@dataclass(frozen=True)
class MeshConfig:
    """Engine switches. Every quality fix can be turned off, which is how docs/images shows 'before'."""

    source: MeshSourceConfig = field(default_factory=MeshSourceConfig)
    shading: ShadingMethod = "low_frequency"
    shading_cells_across: float = 4.0  # coarse grid cells across the face box (finer: beards fade)
    keep_target_lips: bool = True
    lips_open_difference: tuple[float, float] = (0.2, 0.35)  # target - source openness: start, full
    blend: BlendMethod = "multiband"  # "feather": one alpha blend (the edge and holes show as a line)
    # in the outline zone, target pixels darker than these shares of its face's mean luma are kept
    # (fully below the first); None pastes the whole outline
    rim_guard: tuple[float, float] | None = (0.5, 0.75)
    smoothing: Smoothing | None = field(default_factory=Smoothing)  # None: every frame measured alone
    # what stands in front of a target face keeps the target's pixels (mesh_occlusion.py); a stream
    # turns it off with SwapOptions.occlusion
    occlusion: OcclusionThresholds | None = field(default_factory=OcclusionThresholds)
    # a paste box whose larger side exceeds this is swapped at this size and composited back at full
    # resolution (docs/mesh_engine.md "Working resolution"); None: always at full resolution
    working_px: int | None = 288
    # ...and at this size while the daemon is short of CPU (`MeshEngine.set_strain`: its swap cadence
    # sheds frames), as libwebrtc lowers the resolution under CPU overuse: a 640x480 face's swap
    # costs a quarter less and the frames it sheds come back (docs/mesh_engine.md); None: working_px
    strained_working_px: int | None = 192


class MeshEngine:
    """SwapEngine for the mesh method; stateless per frame, so one instance serves many streams."""

    name: EngineName = "mesh"

    def __init__(
        self,
        detector: Detector,
        landmarker: Landmarker,
        config: MeshConfig | None = None,
        hands: FaceHands | None = None,
    ) -> None:
        self.detector = detector
        self.hands = hands  # hands in front of a face (mesh_hands.py); None: the skin model alone
        self.landmarker = landmarker
        self.config = config or MeshConfig()
        self.timer = StageTimer()  # per-face "warp" and "blend" times, read by the bench
        self.occluded_faces = 0  # faces swapped with something in front of them
        self._occlusion_listeners: list[Callable[[], None]] = []
        self.last_occlusion: Occlusion | None = None  # of the last face swapped (tests, the bench)
        self._strained: Callable[[], bool] = lambda: False
        if self.config.shading not in SHADING_METHODS:
            raise InvalidInputError(f"unknown shading {self.config.shading!r}; choose from {SHADING_METHODS}")
        if self.config.blend not in BLEND_METHODS:
            raise InvalidInputError(f"unknown blend {self.config.blend!r}; choose from {BLEND_METHODS}")

    def set_strain(self, strained: Callable[[], bool]) -> None:
        """Where the daemon says whether it is short of CPU now (read on the worker thread, per frame):
        while it is, faces are swapped at `MeshConfig.strained_working_px`."""
        self._strained = strained

    @property
    def working_px(self) -> int | None:
        """The working size faces are swapped at now (MeshConfig.working_px or, strained, its smaller one)."""
        strained_px = self.config.strained_working_px
        if strained_px is not None and self._strained():
            return strained_px if self.config.working_px is None else min(strained_px, self.config.working_px)
        return self.config.working_px

    def add_occlusion_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` for every face swapped with something in front of it (/metrics)."""
        self._occlusion_listeners.append(listener)

    def add_hand_search_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` for every palm search of the hand check, its costly step (/metrics)."""
        if self.hands is not None:
            self.hands.search_listeners.append(listener)

    def covered_tracks(self, memory: StreamMemory) -> set[int]:
        """The stream's face tracks whose swap is fading out because something covers most of the face
        (the tracker holds them through it: face_tracker.FaceTracker.hold_covered)."""
        tracks = memory.part(MeshMemory).tracks
        return {track_id for track_id, track in tracks.items() if track.occlusion.fade < COVERED_FADE}

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
        mesh = self.source_mesh(image)
        started = time.perf_counter()
        source = build_mesh_source(image, mesh, self.config.source)
        self.timer.record("source", time.perf_counter() - started)
        return source

    def swap(
        self, frame: Frame, faces: Sequence[TrackedFace], source: SourceFace, options: SwapOptions
    ) -> Frame:
        """A copy of `frame` with every meshed face swapped; faces without a mesh are left alone."""
        if not isinstance(source, MeshSource):
            raise InvalidInputError(f"the mesh engine needs a MeshSource, got {type(source).__name__}")
        memory = None
        if options.memory is not None and self.config.smoothing is not None:
            memory = options.memory.part(MeshMemory)
            memory.begin_frame(source)
        output = frame.copy()
        plans = options.plans if options.plans is not None else [None] * len(faces)
        for face, plan in zip(faces, plans, strict=True):
            if face.mesh is not None:
                track = memory.track(face.track_id) if memory is not None else None
                self.swap_face(output, face.mesh, source, options, track, plan)
        return output

    def plan(
        self, frame: Frame, faces: Sequence[TrackedFace], source: SourceFace
    ) -> list[FaceGeometry | None]:
        """Each face's swap geometry, remap field included (mesh_geometry.py), for `SwapOptions.plans`:
        the pipeline's track half works it out so the swap half does less. None for a face without a
        mesh, and for every face of a device frame (its field is built where the swap runs)."""
        if not isinstance(source, MeshSource) or is_device_array(frame):
            return [None] * len(faces)
        size = (frame.shape[1], frame.shape[0])
        return [
            None
            if face.mesh is None
            else face_geometry(face.mesh, size, source.src_triangles, self.working_px)
            for face in faces
        ]

    def swap_face(
        self,
        frame: Frame,
        mesh: NDArray[np.float32],
        source: MeshSource,
        options: SwapOptions,
        track: TrackMemory | None = None,
        plan: FaceGeometry | None = None,
    ) -> PasteBox:
        """Swap one face in place; only pixels inside the returned box may change. `track`: this face's
        memory of earlier frames (smoothing), None to measure this frame alone. `plan`: this mesh's
        geometry from `plan` (worked out here when None, or when made for another mesh).

        A box larger than the working size (`working_px`) is swapped at that size and composited back at full
        resolution (gpu_ops.working_resolution), so a 720p close-up costs what a 480p face does.
        """
        geometry = plan
        if geometry is None or geometry.mesh is not mesh:
            geometry = face_geometry(
                mesh, (frame.shape[1], frame.shape[0]), source.src_triangles, self.working_px,
                on_device=is_device_array(frame),
            )  # fmt: skip
        box = geometry.box
        x1, y1, x2, y2 = box
        if x2 - x1 < 2 or y2 - y1 < 2:
            return box
        hands = self._hand_outlines(frame, mesh, options, track)
        region = frame[y1:y2, x1:x2]
        corner = np.array([x1, y1], np.float32)
        working = geometry.working
        origin = (float(x1), float(y1))
        if working is None:
            local_hands = [hand - corner for hand in hands]
            self._swap_region(
                region, geometry.region_mesh, geometry.field, source, options, track, origin, 1.0, local_hands
            )
            return box
        started = time.perf_counter()
        small_target = shrink(region, working)
        small = small_target.copy()
        shrunk_at = time.perf_counter()
        alpha = self._swap_region(
            small,
            geometry.region_mesh,
            geometry.field,
            source,
            options,
            track,
            origin,
            working[0] / (x2 - x1),
            [(hand - corner) * np.float32(working[0] / (x2 - x1)) for hand in hands],
        )
        swapped_at = time.perf_counter()
        composite_working_resolution(region, small_target, small, alpha)
        self.timer.record("resample", shrunk_at - started + time.perf_counter() - swapped_at)
        return box

    def _hand_outlines(
        self, frame: Frame, mesh: NDArray[np.float32], options: SwapOptions, track: TrackMemory | None
    ) -> list[NDArray[np.float32]]:
        """Outlines (frame px) of the hands in front of this face, at the track's cadence (mesh_hands.py)."""
        if self.hands is None or not options.occlusion or self.config.occlusion is None:
            return []
        started = time.perf_counter()
        low, high = mesh[:, :2].min(axis=0), mesh[:, :2].max(axis=0)
        box = np.concatenate([low, high]).astype(np.float32)
        outlines = self.hands.outlines(frame, box, track.hands if track is not None else None)
        self.timer.record("hands", time.perf_counter() - started)
        return outlines

    def _swap_region(
        self,
        region: Frame,
        mesh: NDArray[np.float32],
        field_: Any,
        source: MeshSource,
        options: SwapOptions,
        track: TrackMemory | None,
        origin: tuple[float, float] = (0.0, 0.0),
        scale: float = 1.0,
        hands: Sequence[NDArray[np.float32]] = (),
    ) -> Any:
        """Swap the face whose mesh (region px) fills `region`, in place; returns the paste alpha (what
        of the source each pixel shows at the finest band), which the working-resolution composite uses.
        `origin` is the region's corner in frame px and `scale` its px per frame px (the occlusion mask
        follows the face from frame to frame in frame px). `field_`: the remap field onto `mesh`
        (mesh_geometry.py)."""
        started = time.perf_counter()
        size = (region.shape[1], region.shape[0])
        on_device = is_device_array(region)  # CuPy frame: field, warp, masks and blend stay on the device
        texture_name: TextureName = "texture_features_cut" if options.mouth_mask else "texture"
        warped = apply_remap(self._pixels(source, texture_name, on_device), field_)
        xp = get_array_module(warped)
        patch = color_channels(warped)
        # what the frame keeps of the paste: 0 in the target's inner mouth, less over its own lips
        keep = xp.ones(warped.shape[:2], np.float32)
        if options.mouth_mask:
            # the soft cut travels with the texture; this hard zero covers target pixels inside the
            # inner-lip outline that the mesh gives to a curled lip triangle (mouth corners)
            inner_mouth = fill_polygons(size, [mesh[list(topology.LIPS_INNER), :2]], on_device=on_device)
            keep[inner_mouth > 0] = 0.0
        lips_weight = self.lips_weight(mesh, source)
        if track is not None and self.config.smoothing is not None:
            lips_weight = smooth_lips_weight(track, lips_weight, self.config.smoothing)
        if lips_weight > 0.0:
            lips = apply_remap(self._pixels(source, "lips_mask", on_device), field_)
            keep *= 1.0 - lips_weight * (lips.astype(np.float32) * np.float32(1.0 / 255.0))
        alpha = warped[..., 3].astype(np.float32) * np.float32(1.0 / 255.0) * keep
        self.last_occlusion = None
        if options.occlusion and self.config.occlusion is not None:
            occlusion_started = time.perf_counter()
            occlusion = face_occlusion(
                region,
                mesh,
                origin,
                scale,
                track.occlusion if track is not None else None,
                self.config.occlusion,
                hands,
            )
            self.last_occlusion = occlusion
            if occlusion.occluded:
                self.occluded_faces += 1
                for listener in self._occlusion_listeners:
                    listener()
            cells = occlusion.mask.shape[1] * occlusion.factor, occlusion.mask.shape[0] * occlusion.factor
            shown = show_weight(occlusion.mask, cells, occlusion.fade, region)[: size[1], : size[0]]
            alpha, keep = alpha * shown, keep * shown
            self.timer.record("occlusion", time.perf_counter() - occlusion_started)
            if occlusion.fade <= 0.0:
                return alpha  # covered: the target's own pixels, eyes and lips never drawn on the occluder

        if self.config.rim_guard is not None:
            zone = apply_remap(self._pixels(source, "rim_zone", on_device), field_)
            guard = rim_guard(
                region, alpha, zone.astype(np.float32) * np.float32(1.0 / 255.0), self.config.rim_guard
            )
            alpha, keep = alpha * guard, keep * guard
        warped_at = time.perf_counter()
        patch = self.relight(patch, region, alpha, track)
        relit_at = time.perf_counter()
        if self.config.blend == "feather":
            blend(region, patch, alpha)
        else:
            bands_name: TextureName = "band_masks_features_cut" if options.mouth_mask else "band_masks"
            bands = apply_remap(self._pixels(source, bands_name, on_device), field_)
            multiband_blend(region, patch, [alpha, *mask_planes(bands, keep)])
        self.timer.record("warp", warped_at - started)
        self.timer.record("shading", relit_at - warped_at)
        self.timer.record("blend", time.perf_counter() - relit_at)
        return alpha

    @staticmethod
    def _pixels(source: MeshSource, name: TextureName, on_device: bool) -> Any:
        return source.pixels_on_device(name) if on_device else getattr(source, name)

    def lips_weight(self, mesh: NDArray[np.float32], source: MeshSource) -> float:
        """How much of the target's own lips to keep (0..1), from how much wider its mouth is open."""
        if not self.config.keep_target_lips:
            return 0.0
        start, full = self.config.lips_open_difference
        difference = mouth_openness(mesh) - source.mouth_openness
        return float(np.clip((difference - start) / max(full - start, 1e-3), 0.0, 1.0))

    def relight(
        self, patch: Frame, region: Frame, alpha: NDArray[np.float32], track: TrackMemory | None = None
    ) -> Frame:
        """The warped source patch with the target's light and tone (the configured method); with a
        track, the low-frequency shading ratio is smoothed over the track's frames."""
        if self.config.shading == "none":
            return patch
        if self.config.shading == "lab":
            return transfer_lab_statistics(patch, region, alpha)  # type: ignore[no-any-return]
        cell_px = max(4.0, patch.shape[1] / self.config.shading_cells_across)
        grid = shading_grid((patch.shape[1], patch.shape[0]), cell_px)
        if track is not None and self.config.smoothing is not None:
            track.grid = track.grid or grid
            grid = track.grid
        ratio = shading_ratio(patch, region, alpha, grid)
        if track is not None and self.config.smoothing is not None:
            ratio = smooth_shading_ratio(track, ratio, self.config.smoothing)
        return apply_shading_ratio(patch, ratio)  # type: ignore[no-any-return]


__all__ = ["FaceGeometry", "MeshConfig", "MeshEngine", "MeshSource", "NoFaceError", "paste_box"]
