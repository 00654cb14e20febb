"""Landmarker: crop geometry, input tensors and mapping back to frame px, with fake sessions."""

import math

import numpy as np
import pytest
from numpy.typing import NDArray

from models.errors import ModelContractError
from models.landmarks import CropRule, Landmarker, crop_matrices, postprocess_facemesh
from models.registry import get_spec
from tests.fakes import FakeSession, Feeds

FACEMESH = get_spec("facemesh_468")
PFLD = get_spec("pfld_68")
BOX = np.array([[100.0, 50.0, 200.0, 170.0]], np.float32)  # centre (150, 110), long side 120
LEVEL_EYES = np.array([[[125, 90], [175, 90], [150, 115], [130, 140], [170, 140]]], np.float32)


def facemesh_returning(crop_points: NDArray[np.float32], logit: float) -> FakeSession:
    def respond(feeds: Feeds) -> list[NDArray[np.float32]]:
        assert feeds["input_1"].shape == (1, 192, 192, 3)
        return [crop_points.reshape(1, 1, 1, 1404), np.full((1, 1, 1, 1), logit, np.float32)]

    return FakeSession.for_spec(FACEMESH, respond)


def test_crop_matrix_centres_the_box_and_scales_its_long_side() -> None:
    matrix = crop_matrices(LEVEL_EYES, BOX, CropRule(box_scale=1.5, align_eyes=True), 192)[0]
    np.testing.assert_allclose(matrix @ [150.0, 110.0, 1.0], [96.0, 96.0], atol=1e-9)
    np.testing.assert_allclose(matrix[:, 0:2], np.eye(2) * 192 / 180.0, atol=1e-9)


def test_crop_matrix_levels_a_tilted_eye_line() -> None:
    angle = math.radians(30.0)
    eyes = LEVEL_EYES.copy()
    eyes[0, 1] = eyes[0, 0] + 50.0 * np.array([math.cos(angle), math.sin(angle)], np.float32)
    matrix = crop_matrices(eyes, BOX, CropRule(box_scale=1.5, align_eyes=True), 192)[0]
    left, right = (matrix @ [*point, 1.0] for point in eyes[0, :2])
    assert right[1] - left[1] == pytest.approx(0.0, abs=1e-6)
    assert right[0] > left[0]
    upright = crop_matrices(eyes, BOX, CropRule(box_scale=1.1, align_eyes=False), 112)[0]
    assert upright[0, 1] == 0.0 and upright[1, 0] == 0.0


def test_facemesh_points_map_back_to_frame_with_scaled_depth() -> None:
    crop_points = np.zeros((468, 3), np.float32)
    crop_points[:, 0:2] = 96.0  # crop centre
    crop_points[0] = [96.0 + 19.2, 96.0, 19.2]  # 10 % of the crop to the right, same depth scale
    landmarker = Landmarker(facemesh_returning(crop_points, logit=0.0), FACEMESH)

    result = landmarker.detect(np.zeros((240, 320, 3), np.uint8), LEVEL_EYES, BOX)

    assert result.points.shape == (1, 468, 3)
    np.testing.assert_allclose(result.points[0, 1], [150.0, 110.0, 0.0], atol=1e-4)
    np.testing.assert_allclose(result.points[0, 0], [150.0 + 18.0, 110.0, 18.0], atol=1e-4)  # crop side 180
    assert result.presence.tolist() == pytest.approx([0.5])


def test_facemesh_input_is_rgb_over_255_and_loops_over_faces_with_fixed_batch() -> None:
    session = facemesh_returning(np.zeros((468, 3), np.float32), logit=5.0)
    landmarker = Landmarker(session, FACEMESH)
    frame = np.zeros((240, 320, 3), np.uint8)
    frame[..., 0] = 255
    frame[..., 2] = 51

    result = landmarker.detect(frame, np.repeat(LEVEL_EYES, 2, axis=0), np.repeat(BOX, 2, axis=0))

    assert len(session.calls) == 2  # the file's batch is fixed at 1
    crop = session.calls[0][1]["input_1"][0]
    np.testing.assert_allclose(crop[96, 96], [1.0, 0.0, 0.2], atol=1e-6)
    assert len(result) == 2 and result.presence[0] > 0.99


def test_pfld_is_batched_and_normalised_to_the_crop() -> None:
    def respond(feeds: Feeds) -> list[NDArray[np.float32]]:
        batch = feeds["input"].shape[0]
        assert feeds["input"].shape[1:] == (3, 112, 112)
        return [np.full((batch, 136), 0.5, np.float32)]

    session = FakeSession.for_spec(PFLD, respond)
    result = Landmarker(session, PFLD).detect(
        np.zeros((240, 320, 3), np.uint8), np.repeat(LEVEL_EYES, 3, axis=0), np.repeat(BOX, 3, axis=0)
    )
    assert len(session.calls) == 1
    assert result.points.shape == (3, 68, 3)
    np.testing.assert_allclose(
        result.points[:, :, 0:2], np.broadcast_to([150.0, 110.0], (3, 68, 2)), atol=1e-4
    )
    assert np.all(result.points[:, :, 2] == 0.0) and np.all(result.presence == 1.0)


def test_no_faces_gives_empty_fixed_shapes_without_running() -> None:
    session = facemesh_returning(np.zeros((468, 3), np.float32), logit=0.0)
    result = Landmarker(session, FACEMESH).detect(
        np.zeros((8, 8, 3), np.uint8), np.zeros((0, 5, 2), np.float32), np.zeros((0, 4), np.float32)
    )
    assert result.points.shape == (0, 468, 3) and session.calls == []


def test_presence_sigmoid_is_stable_for_large_logits() -> None:
    outputs = [np.zeros((2, 1, 1, 1404), np.float32), np.array([-1000.0, 1000.0], np.float32)]
    result = postprocess_facemesh(outputs, np.repeat(np.eye(2, 3)[None], 2, axis=0), 192)
    assert result.presence.tolist() == pytest.approx([0.0, 1.0])


def test_rejects_non_landmark_specs() -> None:
    with pytest.raises(ModelContractError):
        Landmarker(facemesh_returning(np.zeros((468, 3), np.float32), 0.0), get_spec("yunet_n"))


def test_faces_of_many_frames_go_through_one_run_and_come_back_per_frame() -> None:
    """Each face's crop is coloured by its frame; the fake reports the crop's mean as presence logit, so
    the split back per frame is checked against which frame each crop came from."""
    runs: list[int] = []

    def respond(feeds: Feeds) -> list[NDArray[np.float32]]:
        crops = feeds["input_1"]
        runs.append(len(crops))
        logits = crops.reshape(len(crops), -1).mean(axis=1).reshape(-1, 1, 1, 1) * 10.0
        return [np.zeros((len(crops), 1, 1, 1404), np.float32), logits.astype(np.float32)]

    landmarker = Landmarker(FakeSession.for_spec(FACEMESH, respond, symbolic_batch=True), FACEMESH)
    frames = [np.full((240, 320, 3), value, np.uint8) for value in (0, 255, 0)]
    two_boxes = np.concatenate([BOX, BOX + 10.0])
    two_eyes = np.concatenate([LEVEL_EYES, LEVEL_EYES + 10.0])
    results = landmarker.detect_batch(
        frames, [LEVEL_EYES, two_eyes, LEVEL_EYES[:0]], [BOX, two_boxes, BOX[:0]]
    )
    assert runs == [3]  # three faces of two frames in one run; the faceless frame adds nothing
    assert [len(result) for result in results] == [1, 2, 0]
    assert results[0].presence[0] == pytest.approx(0.5)  # black frame: logit 0
    assert results[1].presence.min() > 0.99  # white frame: both faces
    assert landmarker.detect_batch(frames[:1], [LEVEL_EYES[:0]], [BOX[:0]])[0].points.shape == (0, 468, 3)
