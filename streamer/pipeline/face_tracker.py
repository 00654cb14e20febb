"""Face tracking for video: the landmarker follows the faces, the detector runs when it has to.

MediaPipe-style: on a detection frame the detector (letterboxed to `detection_width`) finds the faces
and they are matched to the live tracks by box IoU; on the frames between, each face's crop is derived
from its previous mesh, so the landmarker alone follows it (a face whose presence drops below the
threshold counts as missed). The detector runs when the tracker loses confidence (a face's presence
under `redetect_below`, or a face missed), and otherwise every `detect_every` frames to find faces that
enter the picture: on a steady face that is one detection in ten frames instead of one in two. With a landmarker, box and 5 points come from the mesh on every frame (one
consistent source); without one, from the detector. A missed face is held, unchanged, for `hold_frames`
frames so the swap does not flicker; then it is dropped. A face the swap was fading out because
something covers most of it (`hold_covered`, told by the engine after each frame) is held longer,
`covered_hold_frames`, with its last mesh: the landmarker loses a face behind a hand or a board, and when
it shows again the detector finds it on the held box, so the track (and the engine's memory of it, its
fade) goes on and the swap fades back in instead of starting a new track. Box, 5 points and mesh are
One-Euro smoothed.
"""

import logging
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from models.detector import Detections, InputSize, fit_input_size
from models.face import Frame, TrackedFace
from models.landmarks import FaceLandmarks
from streamer.pipeline.smoothing import OneEuroConfig, OneEuroFilter, StreamClock

logger = logging.getLogger(__name__)

FloatArray = NDArray[np.float32]

# Face-mesh indices: eye corners (image-left eye 33/133, image-right eye 362/263), nose tip, mouth corners.
MESH_EYE_LEFT = (33, 133)
MESH_EYE_RIGHT = (362, 263)
MESH_NOSE_TIP = 1
MESH_MOUTH_LEFT = 61
MESH_MOUTH_RIGHT = 291
# The mesh's bounding box vs a detector box of the same face (YuNet, 8 photos): 1.03 x as wide, 0.92 x
# as tall, centre 0.06 box heights lower. Undone so the crop size does not jump on detection frames.
_MESH_BOX_WIDTH_RATIO = 1.03
_MESH_BOX_HEIGHT_RATIO = 0.92
_MESH_BOX_CENTRE_SHIFT = 0.06
DEFAULT_SMOOTHING = OneEuroConfig()
DUPLICATE_IOU = 0.5


class FaceDetector(Protocol):
    def detect(self, frame: Frame, *, input_size: InputSize | None = None) -> Detections: ...


class FaceLandmarker(Protocol):
    def detect(self, frame: Frame, landmarks_5: FloatArray, boxes: FloatArray) -> FaceLandmarks: ...


def landmarks_5_from_mesh(mesh: FloatArray) -> FloatArray:
    """[5,2] InsightFace-order points of a [468,3] mesh: eye centres, nose tip, mouth corners."""
    return np.stack(
        [
            mesh[list(MESH_EYE_LEFT), 0:2].mean(axis=0),
            mesh[list(MESH_EYE_RIGHT), 0:2].mean(axis=0),
            mesh[MESH_NOSE_TIP, 0:2],
            mesh[MESH_MOUTH_LEFT, 0:2],
            mesh[MESH_MOUTH_RIGHT, 0:2],
        ]
    ).astype(np.float32)


def box_from_mesh(mesh: FloatArray) -> FloatArray:
    """[4] detector-like box of a mesh (its bounding box, corrected to the detector's framing)."""
    low, high = mesh[:, 0:2].min(axis=0), mesh[:, 0:2].max(axis=0)
    width = (high[0] - low[0]) / _MESH_BOX_WIDTH_RATIO
    height = (high[1] - low[1]) / _MESH_BOX_HEIGHT_RATIO
    centre_x = (low[0] + high[0]) / 2.0
    centre_y = (low[1] + high[1]) / 2.0 - _MESH_BOX_CENTRE_SHIFT * height
    return np.array(
        [centre_x - width / 2, centre_y - height / 2, centre_x + width / 2, centre_y + height / 2], np.float32
    )


def box_iou(boxes_a: FloatArray, boxes_b: FloatArray) -> NDArray[np.float64]:
    """[A,B] intersection over union of x1,y1,x2,y2 boxes."""
    a = np.asarray(boxes_a, np.float64)[:, None, :]
    b = np.asarray(boxes_b, np.float64)[None, :, :]
    overlap = np.clip(np.minimum(a[..., 2:4], b[..., 2:4]) - np.maximum(a[..., 0:2], b[..., 0:2]), 0.0, None)
    intersection = overlap[..., 0] * overlap[..., 1]
    area_a = (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1])
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    return np.asarray(intersection / np.maximum(area_a + area_b - intersection, 1e-9))


def associate(
    track_boxes: FloatArray, detection_boxes: FloatArray, iou_threshold: float
) -> list[tuple[int, int]]:
    """Greedy one-to-one (track, detection) pairs, highest IoU first, each at least `iou_threshold`."""
    if len(track_boxes) == 0 or len(detection_boxes) == 0:
        return []
    iou = box_iou(track_boxes, detection_boxes)
    pairs: list[tuple[int, int]] = []
    while True:
        track_index, detection_index = np.unravel_index(int(np.argmax(iou)), iou.shape)
        if iou[track_index, detection_index] < iou_threshold:
            return pairs
        pairs.append((int(track_index), int(detection_index)))
        iou[track_index, :] = -1.0
        iou[:, detection_index] = -1.0


@dataclass
class _Track:
    """One face being followed: its last raw observation, its smoothed output and its filters."""

    track_id: int
    box: FloatArray
    score: float
    landmarks_5: FloatArray
    mesh: FloatArray | None = None
    presence: float = 1.0  # the landmarker's face probability for the last mesh
    missed: int = 0
    covered: bool = False  # the swap was fading out: something covers most of the face
    output: TrackedFace | None = None
    filters: dict[str, OneEuroFilter] = field(default_factory=dict)


@dataclass
class TrackStep:
    """One frame of one stream between `FaceTracker.begin` and `finish`: the faces observed so far and,
    when a landmarker is used, the 5 points and boxes its crops are cut from."""

    frame: Frame
    now: float
    observed: list[_Track]
    detection_frame: bool
    mesh_points: FloatArray = field(default_factory=lambda: np.zeros((0, 5, 2), np.float32))  # [M,5,2]
    mesh_boxes: FloatArray = field(default_factory=lambda: np.zeros((0, 4), np.float32))  # [M,4]

    @property
    def needs_mesh(self) -> bool:
        return len(self.mesh_boxes) > 0


class FaceTracker:
    """Per-stream face tracks; `track(frame)` once per frame, in order. Not thread-safe (but for
    `hold_covered`)."""

    def __init__(
        self,
        detector: FaceDetector,
        landmarker: FaceLandmarker | None,
        *,
        detect_every: int = 10,
        detection_width: int = 320,
        hold_frames: int = 3,
        covered_hold_frames: int = 45,
        iou_threshold: float = 0.3,
        presence_threshold: float = 0.5,
        redetect_below: float = 0.9,
        smoothing: OneEuroConfig | None = DEFAULT_SMOOTHING,
        frame_rate: float = 30.0,
        points_from_mesh: bool = True,
    ) -> None:
        if detect_every < 1 or hold_frames < 0 or covered_hold_frames < hold_frames:
            raise ValueError(
                "detect_every must be >= 1 and 0 <= hold_frames <= covered_hold_frames "
                f"(got {detect_every}, {hold_frames}, {covered_hold_frames})"
            )
        self.detector = detector
        self.landmarker = landmarker
        self.detect_every = detect_every
        self.detection_width = detection_width
        self.hold_frames = hold_frames
        self.covered_hold_frames = covered_hold_frames
        self.iou_threshold = iou_threshold
        self.presence_threshold = presence_threshold
        self.redetect_below = redetect_below
        self.smoothing = smoothing
        self.frame_rate = frame_rate
        self.points_from_mesh = points_from_mesh
        self.detections_run = 0
        self.reset()

    def reset(self) -> None:
        """Forget every track (new stream, scene cut, source change); ids keep counting up."""
        self._tracks: list[_Track] = []
        self._frame_index = -1
        self._last_detection_index = -(10**9)
        self._clock = StreamClock(self.frame_rate)
        self._next_id = getattr(self, "_next_id", 0)

    def hold_covered(self, track_ids: Collection[int]) -> None:
        """The tracks whose swap is fading out for occlusion this frame (held `covered_hold_frames` when
        the landmarker loses them); every other track is not covered. The one call that may come from
        another thread (the daemon's swap thread) while `begin`/`finish` of the next frame run: it only
        sets a flag on the tracks of the moment, so the worst a race does is take effect a frame later."""
        for track in list(self._tracks):
            track.covered = track.track_id in track_ids

    def detection_due(self) -> bool:
        """Whether the next `track` call runs the detector: no faces yet, a face the landmarker is unsure
        of or lost, or `detect_every` frames since the last detection (faces entering the picture)."""
        if not self._tracks or self._frame_index + 1 - self._last_detection_index >= self.detect_every:
            return True
        if self.landmarker is None:
            return False  # without a landmarker nothing else follows the faces: the cadence alone
        return any(track.missed or track.presence < self.redetect_below for track in self._tracks)

    def detection_input_size(self, frame: Frame) -> InputSize:
        """The detector input (w, h) this tracker uses for frames of this size."""
        height, width = frame.shape[:2]
        return fit_input_size((width, height), self.detection_width)

    def track(
        self, frame: Frame, timestamp: float | None = None, *, detections: Detections | None = None
    ) -> list[TrackedFace]:
        """Faces in this frame (held ones included), ordered by track id. `timestamp` in seconds;
        by default frames are taken to be 1 / frame_rate apart. A caller that batches detection over
        streams passes `detections` (from `detector.detect_batch(..., input_size=
        detection_input_size(frame))`) when `detection_due()`; they are ignored when not due."""
        step = self.begin(frame, timestamp, detections=detections)
        landmarks = None
        if step.needs_mesh:
            assert self.landmarker is not None
            landmarks = self.landmarker.detect(frame, step.mesh_points, step.mesh_boxes)
        return self.finish(step, landmarks)

    def begin(
        self, frame: Frame, timestamp: float | None = None, *, detections: Detections | None = None
    ) -> "TrackStep":
        """`track` up to the mesh: detection (when due) and which faces the landmarker must run on. A
        caller that batches the landmarker over streams runs it on `step.mesh_points/mesh_boxes` of
        every stream's step at once and hands each stream its part in `finish`."""
        due = self.detection_due()
        self._frame_index += 1
        now = self._clock.time(timestamp)
        if due:
            observed = self._detect(frame, detections)
        else:
            observed = [track for track in self._tracks if track.mesh is not None]
        step = TrackStep(frame, now, observed, self._last_detection_index == self._frame_index)
        if self.landmarker is not None and observed:
            if step.detection_frame:
                step.mesh_points = np.stack([t.landmarks_5 for t in observed])
                step.mesh_boxes = np.stack([t.box for t in observed])
            else:  # between detections the crop follows the previous mesh
                step.mesh_points = np.stack(
                    [landmarks_5_from_mesh(t.mesh) for t in observed if t.mesh is not None]
                )
                step.mesh_boxes = np.stack([box_from_mesh(t.mesh) for t in observed if t.mesh is not None])
        return step

    def finish(self, step: "TrackStep", landmarks: FaceLandmarks | None) -> list[TrackedFace]:
        """The rest of `track`, given the landmarker's result for `step.mesh_*` (None when not needed)."""
        observed = step.observed
        if step.needs_mesh:
            if landmarks is None or len(landmarks) != len(observed):
                raise ValueError(f"finish needs landmarks for the {len(observed)} faces of its step")
            observed = self._apply_mesh(observed, landmarks, step.detection_frame)
        for track in observed:
            track.missed = 0
            track.output = self._smoothed(track, step.now)
        self._tracks = [t for t in self._tracks if t.missed <= self._hold(t) and t.output is not None]
        self._drop_duplicates()
        return [track.output for track in sorted(self._tracks, key=lambda t: t.track_id) if track.output]

    def _hold(self, track: _Track) -> int:
        return self.covered_hold_frames if track.covered else self.hold_frames

    def _detect(self, frame: Frame, detections: Detections | None) -> list[_Track]:
        """Run the detector (unless given its result); update matched tracks, start new ones, count the
        unmatched as missed."""
        self._last_detection_index = self._frame_index
        if detections is None:
            self.detections_run += 1
            detections = self.detector.detect(frame, input_size=self.detection_input_size(frame))
        track_boxes = np.array([t.box for t in self._tracks], np.float32).reshape(-1, 4)
        pairs = associate(track_boxes, detections.boxes, self.iou_threshold)
        matched_tracks = {track_index for track_index, _ in pairs}
        matched_detections = {detection_index for _, detection_index in pairs}
        observed: list[_Track] = []
        for track_index, detection_index in pairs:
            track = self._tracks[track_index]
            track.box = detections.boxes[detection_index]
            track.score = float(detections.scores[detection_index])
            track.landmarks_5 = detections.landmarks_5[detection_index]
            observed.append(track)
        for index, track in enumerate(self._tracks):
            if index not in matched_tracks:
                track.missed += 1
        for detection_index in range(len(detections)):
            if detection_index not in matched_detections:
                track = _Track(
                    self._next_id,
                    detections.boxes[detection_index],
                    float(detections.scores[detection_index]),
                    detections.landmarks_5[detection_index],
                )
                self._next_id += 1
                self._tracks.append(track)
                observed.append(track)
                logger.debug("new face track %d", track.track_id)
        return observed

    def _drop_duplicates(self) -> None:
        """Two tracks on one face (a mesh that slid onto a neighbour, or a detection that did not match
        a drifted track) would be swapped twice: of a pair overlapping > DUPLICATE_IOU the older id
        stays, taking over the newer track's observation when its own is only held."""
        if len(self._tracks) < 2:
            return
        self._tracks.sort(key=lambda t: t.track_id)
        boxes = np.stack([t.box for t in self._tracks])
        iou = np.triu(box_iou(boxes, boxes) > DUPLICATE_IOU, k=1)
        dropped: set[int] = set()
        for older_index, newer_index in zip(*np.nonzero(iou)):
            older, newer = self._tracks[int(older_index)], self._tracks[int(newer_index)]
            if int(older_index) in dropped or int(newer_index) in dropped:
                continue
            if older.missed > newer.missed:
                older.box, older.score, older.landmarks_5 = newer.box, newer.score, newer.landmarks_5
                older.mesh, older.output, older.missed = newer.mesh, newer.output, newer.missed
                if older.output is not None:
                    older.output = replace(older.output, track_id=older.track_id)
            dropped.add(int(newer_index))
            logger.debug("face track %d duplicates track %d; merged", newer.track_id, older.track_id)
        self._tracks = [track for index, track in enumerate(self._tracks) if index not in dropped]

    def _apply_mesh(
        self, observed: list[_Track], landmarks: FaceLandmarks, detection_frame: bool
    ) -> list[_Track]:
        """Mesh every observed face. On a detection frame the crop came from the detection, between
        detections from the previous mesh. Box and 5 points then come from the new mesh (or, with
        `points_from_mesh=False`, from the detector on detection frames: alternating sources cost
        3x the frame-to-frame jitter on the real clip). A face the landmarker rejects counts as
        missed; a new track rejected at once is dropped (a detector false positive)."""
        kept: list[_Track] = []
        for index, track in enumerate(observed):
            track.presence = float(landmarks.presence[index])
            if track.presence < self.presence_threshold:
                track.missed = track.missed + 1 if track.output is not None else self.hold_frames + 1
                continue
            track.mesh = landmarks.points[index]
            if self.points_from_mesh or not detection_frame:
                track.landmarks_5 = landmarks_5_from_mesh(track.mesh)
                track.box = box_from_mesh(track.mesh)
            kept.append(track)
        return kept

    def _smoothed(self, track: _Track, now: float) -> TrackedFace:
        box, landmarks_5, mesh = track.box, track.landmarks_5, track.mesh
        if self.smoothing is not None:
            face_size = float(np.sqrt(max((box[2] - box[0]) * (box[3] - box[1]), 1.0)))
            scale = 1.0 / face_size

            def smooth(key: str, value: FloatArray) -> FloatArray:
                smoother = track.filters.setdefault(key, OneEuroFilter(self.smoothing))
                return smoother.filter(value, now, scale)

            box = smooth("box", box)
            landmarks_5 = smooth("landmarks_5", landmarks_5)
            mesh = None if mesh is None else smooth("mesh", mesh)
        return TrackedFace(
            track_id=track.track_id,
            box=np.asarray(box, np.float32),
            score=track.score,
            landmarks_5=np.asarray(landmarks_5, np.float32),
            mesh=None if mesh is None else np.asarray(mesh, np.float32),
        )


def analyse_image(
    detector: FaceDetector, landmarker: FaceLandmarker | None, frame: Frame
) -> list[TrackedFace]:
    """Faces of a single picture: detection with the detector's own input size, no smoothing or history.
    Faces the landmarker rejects (presence < 0.5) are left out. Ordered by detection score."""
    detections = detector.detect(frame)
    if len(detections) == 0:
        return []
    meshes: list[FloatArray | None] = [None] * len(detections)
    keep = np.ones(len(detections), bool)
    if landmarker is not None:
        landmarks = landmarker.detect(frame, detections.landmarks_5, detections.boxes)
        meshes = list(landmarks.points)
        keep = landmarks.presence >= 0.5
    return [
        TrackedFace(
            track_id=index,
            box=detections.boxes[index],
            score=float(detections.scores[index]),
            landmarks_5=detections.landmarks_5[index],
            mesh=meshes[index],
        )
        for index in range(len(detections))
        if keep[index]
    ]
