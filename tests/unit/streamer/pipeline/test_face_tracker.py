"""Tracker logic with a scripted detector and landmarker: cadence, association, ids, hold, mesh tracking."""

import numpy as np
import pytest
from numpy.typing import NDArray

from models.detector import Detections, InputSize
from models.face import Frame
from models.landmarks import FaceLandmarks
from streamer.pipeline.face_tracker import (
    FaceTracker,
    analyse_image,
    associate,
    box_from_mesh,
    landmarks_5_from_mesh,
)

FloatArray = NDArray[np.float32]
Scene = dict[int, list[list[float]]]  # frame number -> true face boxes


def frame_number(number: int) -> Frame:
    frame = np.zeros((240, 320, 3), np.uint8)
    frame[0, 0, 0] = number
    return frame


def points_of(box: FloatArray) -> FloatArray:
    x1, y1, x2, y2 = box
    w, h = x2 - x1, y2 - y1
    relative = [(0.3, 0.4), (0.7, 0.4), (0.5, 0.6), (0.35, 0.8), (0.65, 0.8)]
    return np.array([(x1 + u * w, y1 + v * h) for u, v in relative], np.float32)


def mesh_of(box: FloatArray) -> FloatArray:
    """A 468-point mesh whose box_from_mesh is `box` and whose 5 points are points_of(box)."""
    x1, y1, x2, y2 = (float(v) for v in box)
    width, height = (x2 - x1) * 1.03, (y2 - y1) * 0.92
    centre_x, centre_y = (x1 + x2) / 2, (y1 + y2) / 2 + 0.06 * (y2 - y1)
    mesh = np.zeros((468, 3), np.float32)
    mesh[:, 0] = centre_x
    mesh[:, 1] = centre_y
    mesh[0, 0:2] = [centre_x - width / 2, centre_y - height / 2]
    mesh[2, 0:2] = [centre_x + width / 2, centre_y + height / 2]
    five = points_of(np.asarray(box, np.float32))
    for index, point in zip((33, 133, 362, 263, 1, 61, 291), (five[0], five[0], five[1], five[1], *five[2:])):
        mesh[index, 0:2] = point
    return mesh


class ScriptedDetector:
    """Reports the scene's faces of the frame it is given (optionally in reverse order), its 5 points
    shifted by `points_offset` px from the landmarker's."""

    def __init__(
        self, scene: Scene, reverse_on: frozenset[int] = frozenset(), points_offset: float = 0.0
    ) -> None:
        self.scene = scene
        self.reverse_on = reverse_on
        self.points_offset = points_offset
        self.calls: list[tuple[int, InputSize | None]] = []

    def detect(self, frame: Frame, *, input_size: InputSize | None = None) -> Detections:
        number = int(frame[0, 0, 0])
        self.calls.append((number, input_size))
        boxes = np.array(self.scene.get(number, []), np.float32).reshape(-1, 4)
        if number in self.reverse_on:
            boxes = boxes[::-1]
        return Detections(
            boxes,
            np.full(len(boxes), 0.9, np.float32),
            np.stack([points_of(b) + self.points_offset for b in boxes])
            if len(boxes)
            else np.zeros((0, 5, 2), np.float32),
        )


class ScriptedLandmarker:
    """Finds the scene face overlapping each requested crop box; presence 0 where there is none."""

    def __init__(
        self,
        scene: Scene,
        absent_on: frozenset[int] = frozenset(),
        presence_on: dict[int, float] | None = None,
    ) -> None:
        self.scene = scene
        self.absent_on = absent_on
        self.presence_on = presence_on or {}  # frame number -> presence reported for a found face
        self.requested_boxes: list[tuple[int, FloatArray]] = []

    def detect(self, frame: Frame, landmarks_5: FloatArray, boxes: FloatArray) -> FaceLandmarks:
        number = int(frame[0, 0, 0])
        truth = np.array(self.scene.get(number, []), np.float32).reshape(-1, 4)
        points, presence = [], []
        for box in boxes:
            self.requested_boxes.append((number, np.array(box)))
            overlaps = [_iou(box, t) for t in truth]
            if not overlaps or max(overlaps) < 0.3 or number in self.absent_on:
                points.append(np.zeros((468, 3), np.float32))
                presence.append(0.0)
            else:
                points.append(mesh_of(truth[int(np.argmax(overlaps))]))
                presence.append(self.presence_on.get(number, 1.0))
        return FaceLandmarks(np.stack(points), np.array(presence, np.float32))


def _iou(a: FloatArray, b: FloatArray) -> float:
    overlap = np.clip(np.minimum(a[2:], b[2:]) - np.maximum(a[:2], b[:2]), 0, None)
    inter = float(overlap[0] * overlap[1])
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


STILL_FACE: list[float] = [100.0, 60.0, 180.0, 160.0]


def run(tracker: FaceTracker, frames: int) -> list[list[tuple[int, list[float]]]]:
    return [
        [(face.track_id, [round(float(v), 3) for v in face.box]) for face in tracker.track(frame_number(n))]
        for n in range(frames)
    ]


def test_detector_runs_every_n_frames_at_reduced_resolution() -> None:
    scene = {n: [STILL_FACE] for n in range(7)}
    detector = ScriptedDetector(scene)
    tracker = FaceTracker(detector, ScriptedLandmarker(scene), detect_every=3, smoothing=None)

    result = run(tracker, 7)

    assert [number for number, _ in detector.calls] == [0, 3, 6]
    assert {size for _, size in detector.calls} == {(320, 256)}
    assert all(len(faces) == 1 and faces[0][0] == 0 for faces in result)


def test_detects_every_frame_while_there_is_no_face() -> None:
    scene: Scene = {3: [STILL_FACE], 4: [STILL_FACE], 5: [STILL_FACE]}
    detector = ScriptedDetector(scene)
    tracker = FaceTracker(detector, ScriptedLandmarker(scene), detect_every=4, smoothing=None)
    result = run(tracker, 6)
    assert [number for number, _ in detector.calls] == [0, 1, 2, 3]
    assert [len(faces) for faces in result] == [0, 0, 0, 1, 1, 1]


def test_detections_from_a_batched_caller_are_used_when_due() -> None:
    scene = {n: [STILL_FACE] for n in range(4)}
    detector = ScriptedDetector(scene)
    tracker = FaceTracker(detector, None, detect_every=2, smoothing=None)
    due = []
    for n in range(4):
        due.append(tracker.detection_due())
        frame = frame_number(n)
        given = detector.detect(frame, input_size=tracker.detection_input_size(frame)) if due[-1] else None
        assert [face.box.tolist() for face in tracker.track(frame, detections=given)] == [STILL_FACE]
    assert due == [True, False, True, False]
    assert tracker.detections_run == 0 and len(detector.calls) == 2


def test_ids_follow_faces_by_overlap_not_detection_order() -> None:
    left, right = [20.0, 40.0, 100.0, 140.0], [200.0, 40.0, 280.0, 140.0]
    scene = {n: [[left[0] + 2 * n, 40.0, left[2] + 2 * n, 140.0], right] for n in range(4)}
    tracker = FaceTracker(
        ScriptedDetector(scene, reverse_on=frozenset({1, 3})), None, detect_every=1, smoothing=None
    )

    result = run(tracker, 4)

    for n, faces in enumerate(result):
        assert faces == [(0, [20.0 + 2 * n, 40.0, 100.0 + 2 * n, 140.0]), (1, right)]


def test_missed_face_is_held_then_dropped_and_a_new_face_gets_a_new_id() -> None:
    scene: Scene = {0: [STILL_FACE], 1: [STILL_FACE], 6: [STILL_FACE]}
    tracker = FaceTracker(ScriptedDetector(scene), None, detect_every=1, hold_frames=2, smoothing=None)

    result = run(tracker, 7)

    held = [(0, STILL_FACE)]
    assert result == [held, held, held, held, [], [], [(1, STILL_FACE)]]


def test_mesh_follows_a_moving_face_between_detections() -> None:
    scene = {n: [[100.0 + 6 * n, 60.0, 180.0 + 6 * n, 160.0]] for n in range(8)}
    detector = ScriptedDetector(scene)
    landmarker = ScriptedLandmarker(scene)
    tracker = FaceTracker(detector, landmarker, detect_every=4, smoothing=None)

    result = run(tracker, 8)

    assert [number for number, _ in detector.calls] == [0, 4]
    for n, faces in enumerate(result):
        assert faces[0][0] == 0
        np.testing.assert_allclose(faces[0][1], scene[n][0], atol=1e-3)
    # between detections the crop is derived from the previous frame's mesh
    crop_frame_2 = next(box for number, box in landmarker.requested_boxes if number == 2)
    np.testing.assert_allclose(crop_frame_2, scene[1][0], atol=1e-3)
    face = tracker.track(frame_number(8))  # no face in the scene any more: held
    assert len(face) == 1 and face[0].mesh is not None


@pytest.mark.parametrize("points_from_mesh", [True, False])
def test_five_points_come_from_one_source(points_from_mesh: bool) -> None:
    scene = {n: [STILL_FACE] for n in range(4)}
    tracker = FaceTracker(
        ScriptedDetector(scene, points_offset=3.0),
        ScriptedLandmarker(scene),
        detect_every=2,
        smoothing=None,
        points_from_mesh=points_from_mesh,
    )
    outputs = [tracker.track(frame_number(n))[0].landmarks_5 for n in range(4)]
    mesh_points = points_of(np.array(STILL_FACE, np.float32))
    for n, points in enumerate(outputs):
        from_detector = n % 2 == 0 and not points_from_mesh
        np.testing.assert_allclose(points, mesh_points + (3.0 if from_detector else 0.0), atol=1e-4)


def test_landmarker_rejection_holds_a_known_face_and_drops_a_false_positive() -> None:
    scene = {n: [STILL_FACE] for n in range(8)}
    landmarker = ScriptedLandmarker(scene, absent_on=frozenset(range(2, 8)))
    tracker = FaceTracker(ScriptedDetector(scene), landmarker, detect_every=2, hold_frames=2, smoothing=None)
    # frames 2, 3 held (missed 1, 2); frame 4 missed 3 > hold: dropped; frame 5 a new track is rejected
    assert [len(faces) for faces in run(tracker, 6)] == [1, 1, 1, 1, 0, 0]

    fresh = FaceTracker(
        ScriptedDetector(scene),
        ScriptedLandmarker(scene, absent_on=frozenset({0})),
        detect_every=2,
        smoothing=None,
    )
    assert len(fresh.track(frame_number(0))) == 0


def test_smoothing_reduces_jitter_of_a_still_face() -> None:
    rng = np.random.default_rng(1)
    jitter = rng.normal(0.0, 1.5, (40, 4))
    scene = {n: [list(np.asarray(STILL_FACE) + jitter[n])] for n in range(40)}
    tracker = FaceTracker(ScriptedDetector(scene), None, detect_every=1)

    boxes = np.array([faces[0][1] for faces in run(tracker, 40)])

    assert (boxes[10:] - boxes[10:].mean(axis=0)).std() < 0.65 * jitter[10:].std()
    assert np.abs(boxes[10:].mean(axis=0) - STILL_FACE).max() < 1.5


def test_a_second_track_on_the_same_face_is_dropped() -> None:
    # frame 0: one face; frame 1 (no detection): the mesh of the face slides half onto the place where
    # frame 2's detector sees it, which is too far to match (IoU < 0.3) but the next mesh lands on it.
    far = [150.0, 60.0, 230.0, 160.0]
    scene: Scene = {0: [STILL_FACE], 1: [[125.0, 60.0, 205.0, 160.0]], 2: [far], 3: [far]}
    tracker = FaceTracker(
        ScriptedDetector(scene), ScriptedLandmarker(scene), detect_every=2, iou_threshold=0.9, smoothing=None
    )
    faces = [tracker.track(frame_number(n)) for n in range(4)]
    assert [[face.track_id for face in frame_faces] for frame_faces in faces] == [[0], [0], [0], [0]]
    np.testing.assert_allclose(faces[2][0].box, far)  # the fresh detection, not the held box


def test_reset_forgets_tracks_but_not_the_id_counter() -> None:
    scene = {n: [STILL_FACE] for n in range(3)}
    tracker = FaceTracker(ScriptedDetector(scene), None, detect_every=2, smoothing=None)
    assert tracker.track(frame_number(0))[0].track_id == 0
    tracker.reset()
    assert tracker.track(frame_number(1))[0].track_id == 1


def test_analyse_image_uses_full_detection_and_the_presence_filter() -> None:
    other = [200.0, 40.0, 280.0, 140.0]
    detector = ScriptedDetector({0: [STILL_FACE, other]})
    faces = analyse_image(detector, ScriptedLandmarker({0: [STILL_FACE]}), frame_number(0))
    assert detector.calls == [(0, None)]
    assert len(faces) == 1 and faces[0].mesh is not None
    assert len(analyse_image(detector, None, frame_number(0))) == 2


def test_mesh_helpers_and_association() -> None:
    box = np.array(STILL_FACE, np.float32)
    np.testing.assert_allclose(box_from_mesh(mesh_of(box)), box, atol=1e-3)
    np.testing.assert_allclose(landmarks_5_from_mesh(mesh_of(box)), points_of(box), atol=1e-4)
    tracks = np.array([[0, 0, 10, 10], [20, 0, 30, 10]], np.float32)
    detections = np.array([[21, 0, 31, 10], [50, 50, 60, 60], [1, 0, 11, 10]], np.float32)
    assert sorted(associate(tracks, detections, 0.3)) == [(0, 2), (1, 0)]


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        FaceTracker(ScriptedDetector({}), None, detect_every=0)


def test_a_confident_mesh_needs_the_detector_only_every_detect_every_frames() -> None:
    scene = {n: [STILL_FACE] for n in range(25)}
    detector = ScriptedDetector(scene)
    tracker = FaceTracker(detector, ScriptedLandmarker(scene), detect_every=10, smoothing=None)
    run(tracker, 25)
    assert [number for number, _ in detector.calls] == [0, 10, 20]


def test_the_detector_runs_on_the_frame_after_the_landmarker_loses_confidence() -> None:
    """A presence under `redetect_below` (still kept: above the 0.5 threshold) or a lost face brings
    the detector in at once, not at the next cadence frame."""
    scene = {n: [STILL_FACE] for n in range(20)}
    detector = ScriptedDetector(scene)
    landmarker = ScriptedLandmarker(scene, absent_on=frozenset({12}), presence_on={5: 0.7})
    tracker = FaceTracker(detector, landmarker, detect_every=10, smoothing=None, redetect_below=0.9)
    faces = run(tracker, 20)
    assert [number for number, _ in detector.calls] == [0, 6, 13]
    assert all(len(frame_faces) == 1 for frame_faces in faces)  # held through the miss: no flicker


def test_a_covered_face_is_held_longer_and_keeps_its_track_when_it_shows_again() -> None:
    """The engine says the swap of track 0 is fading out (something covers the face): the landmarker
    loses it for 6 frames, more than hold_frames, and the tracker holds it until it shows again, then
    follows it under the same id; a face not covered is dropped after hold_frames as before."""
    scene = {n: [STILL_FACE] for n in range(12)}
    lost = frozenset(range(3, 9))
    covered = FaceTracker(
        ScriptedDetector(scene),
        ScriptedLandmarker(scene, absent_on=lost),
        hold_frames=2,
        covered_hold_frames=8,
        smoothing=None,
    )
    ids = []
    for number in range(12):
        faces = covered.track(frame_number(number))
        covered.hold_covered({0} if number >= 2 else set())
        ids.append([face.track_id for face in faces])
    assert ids == [[0]] * 12

    plain = FaceTracker(
        ScriptedDetector(scene),
        ScriptedLandmarker(scene, absent_on=lost),
        hold_frames=2,
        covered_hold_frames=8,
        smoothing=None,
    )
    plain_ids = [[face.track_id for face in plain.track(frame_number(number))] for number in range(12)]
    # dropped after 2 held frames; the face that shows again is a new track
    assert plain_ids[:5] == [[0]] * 5 and [] in plain_ids and plain_ids[-1] not in ([], [0])
    with pytest.raises(ValueError):
        FaceTracker(ScriptedDetector({}), None, hold_frames=5, covered_hold_frames=4)


def panning_lag(step: int, timed: bool) -> float:
    """The smoothed box's largest lag (px) behind a face panning like the bench's (30 px each way over
    3 s) when the tracker sees every `step`-th frame, with or without the frames' capture times."""
    scene = {n: [[100.0 + 30 * np.sin(2 * np.pi * n / 90), 60.0, 0.0, 160.0]] for n in range(240)}
    for boxes in scene.values():
        boxes[0][2] = boxes[0][0] + 80.0
    tracker = FaceTracker(ScriptedDetector(scene), ScriptedLandmarker(scene), detect_every=1)
    lags = []
    for n in range(0, 240, step):
        box = tracker.track(frame_number(n), n / 30 if timed else None)[0].box
        lags.append(abs(scene[n][0][0] - float(box[0])))
    return max(lags[len(lags) // 3 :])


def test_a_stream_seen_every_fifth_frame_is_followed_as_closely_given_its_capture_times() -> None:
    """The swap cadence and the mailbox hand the tracker some of a stream's frames; with their capture
    times the smoothing follows the face as at full rate; without them it takes five frame intervals
    for one and lags three times as far."""
    every_frame = panning_lag(1, timed=True)
    assert every_frame < 1.5
    assert panning_lag(5, timed=True) < 2 * every_frame
    assert panning_lag(5, timed=False) > 3 * panning_lag(5, timed=True)


def test_a_sender_clock_that_goes_back_does_not_freeze_the_smoothing() -> None:
    """Timestamps that restart from zero (a sender restarted its clock) go on one frame interval after
    the last frame: the face is still followed, not held at its last smoothed place."""
    scene = {n: [[100.0 + 3 * n, 60.0, 180.0 + 3 * n, 160.0]] for n in range(60)}
    tracker = FaceTracker(ScriptedDetector(scene), ScriptedLandmarker(scene), detect_every=1)
    for n in range(30):
        tracker.track(frame_number(n), 100.0 + n / 30)
    boxes = [tracker.track(frame_number(n), (n - 30) / 30)[0].box[0] for n in range(30, 60)]
    assert abs(scene[59][0][0] - float(boxes[-1])) < 2.0
    assert np.all(np.diff(boxes) > 0)
