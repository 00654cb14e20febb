"""Detector: letterbox input, batching, NMS and mapping back to frame px, with a fake YuNet session."""

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.errors import InvalidFrameError
from models.detector import (
    Detections,
    Detector,
    fit_input_size,
    non_max_suppression,
    prepare_detector_input,
    prepare_detector_input_by_crop,
)
from models.errors import ModelContractError
from models.registry import get_spec
from tests.fakes import FakeSession, Feeds

YUNET = get_spec("yunet_n")
SCRFD = get_spec("scrfd_500m")


def yunet_face_at(cell_row: int, cell_col: int, score: float) -> FakeSession:
    """A YuNet look-alike that reports one face (stride 16 cell, 32x32 px box) in every image."""

    def respond(feeds: Feeds) -> list[NDArray[np.float32]]:
        batch, _, height, width = feeds["input"].shape
        produced: dict[str, NDArray[np.float32]] = {}
        for stride in (8, 16, 32):
            rows = (height // stride) * (width // stride)
            for kind, depth in (("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10)):
                produced[f"{kind}_{stride}"] = np.zeros((batch, rows, depth), np.float32)
        cell = cell_row * (width // 16) + cell_col
        produced["cls_16"][:, cell] = score
        produced["obj_16"][:, cell] = score
        produced["bbox_16"][:, cell] = [0.5, 0.5, np.log(2.0), np.log(2.0)]
        produced["kps_16"][:, cell] = [0.25, 0.25, 0.75, 0.25, 0.5, 0.5, 0.25, 0.75, 0.75, 0.75]
        return [produced[tensor.name] for tensor in YUNET.outputs]

    return FakeSession.for_spec(YUNET, respond)


def test_letterbox_keeps_aspect_pads_right_bottom_and_uses_spec_colour_order() -> None:
    frame = np.zeros((50, 100, 3), np.uint8)
    frame[..., 0] = 200  # red in RGB
    yunet_tensor = prepare_detector_input([frame], (64, 64), YUNET)
    assert yunet_tensor.shape == (1, 3, 64, 64)
    assert yunet_tensor[0, 2, :32, :].min() == 200.0  # BGR: red is channel 2
    assert yunet_tensor[0, 0, :32, :].max() == 0.0
    assert np.all(yunet_tensor[0, :, 32:, :] == 0.0)  # padding below the 64 x 32 image

    scrfd_tensor = prepare_detector_input([frame], (64, 64), SCRFD)
    np.testing.assert_allclose(scrfd_tensor[0, 0, 0, 0], (200 - 127.5) / 128.0)
    np.testing.assert_allclose(scrfd_tensor[0, 0, 40, 0], -127.5 / 128.0)


def test_detect_maps_input_pixels_back_to_frame_pixels() -> None:
    session = yunet_face_at(cell_row=1, cell_col=2, score=0.9)
    detector = Detector(session, YUNET, input_size=(64, 64))
    frame = np.zeros((150, 200, 3), np.uint8)  # letterbox scale min(64/200, 64/150) = 0.32

    result = detector.detect(frame)
    clipped = detector.detect(np.zeros((100, 200, 3), np.uint8))

    assert len(result) == 1
    # input box: centre ((2.5) * 16, (1.5) * 16) = (40, 24), size 32 -> [24, 8, 56, 40]
    np.testing.assert_allclose(result.boxes[0], np.array([24.0, 8.0, 56.0, 40.0]) / 0.32, rtol=1e-5)
    np.testing.assert_allclose(result.landmarks_5[0, 2], np.array([40.0, 24.0]) / 0.32, rtol=1e-5)
    assert result.scores[0] == pytest.approx(0.9)
    assert clipped.boxes[0, 3] == pytest.approx(100.0)  # 125 clipped to the frame height


def test_detect_batch_runs_the_session_once_for_all_frames() -> None:
    session = yunet_face_at(cell_row=0, cell_col=0, score=0.8)
    detector = Detector(session, YUNET, input_size=(64, 64))
    frames = [np.full((64, 64, 3), value, np.uint8) for value in (10, 20, 30)]

    results = detector.detect_batch(frames)

    assert len(session.calls) == 1
    batch = session.calls[0][1]["input"]
    assert batch.shape == (3, 3, 64, 64)
    assert [float(batch[i, 0, 0, 0]) for i in range(3)] == [10.0, 20.0, 30.0]
    assert [len(r) for r in results] == [1, 1, 1]


def test_fixed_batch_file_is_run_in_chunks() -> None:
    respond = yunet_face_at(0, 0, 0.8)._respond
    session = FakeSession.for_spec(YUNET, respond, batch=1)
    detector = Detector(session, YUNET, input_size=(64, 64))
    results = detector.detect_batch([np.zeros((64, 64, 3), np.uint8)] * 2)
    assert len(session.calls) == 2 and [len(r) for r in results] == [1, 1]


def test_detect_input_size_override_and_threshold() -> None:
    session = yunet_face_at(1, 1, score=0.5)
    assert len(Detector(session, YUNET, input_size=(64, 64)).detect(np.zeros((64, 64, 3), np.uint8))) == 0
    detector = Detector(session, YUNET, input_size=(64, 64), score_threshold=0.4)
    assert len(detector.detect(np.zeros((64, 64, 3), np.uint8), input_size=(96, 64))) == 1
    assert session.calls[-1][1]["input"].shape == (1, 3, 64, 96)


def test_non_max_suppression_keeps_best_of_overlapping() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], np.float32)
    scores = np.array([0.7, 0.9, 0.8], np.float32)
    assert non_max_suppression(boxes, scores, 0.3).tolist() == [1, 2]
    assert non_max_suppression(boxes, scores, 0.9).tolist() == [1, 2, 0]


def test_fit_input_size_rounds_to_multiples_of_32() -> None:
    assert fit_input_size((640, 480), 320) == (320, 256)
    assert fit_input_size((1280, 720), 320) == (320, 192)
    assert fit_input_size((480, 640), 300) == (320, 448)


def test_contract_and_frame_checks() -> None:
    with pytest.raises(ModelContractError):
        Detector(yunet_face_at(0, 0, 0.9), get_spec("facemesh_468"))
    with pytest.raises(ModelContractError, match="multiples of 32"):
        Detector(yunet_face_at(0, 0, 0.9), YUNET, input_size=(100, 64))
    wrong_names = FakeSession([("image", [None, 3, None, None])], [], lambda feeds: [])
    with pytest.raises(ModelContractError, match="missing"):
        Detector(wrong_names, YUNET)
    detector = Detector(yunet_face_at(0, 0, 0.9), YUNET, input_size=(64, 64))
    with pytest.raises(InvalidFrameError):
        detector.detect(np.zeros((64, 64), np.uint8))
    assert detector.detect_batch([]) == []


def test_empty_detections_have_fixed_shapes() -> None:
    empty = Detections.empty()
    assert len(empty) == 0 and empty.landmarks_5.shape == (0, 5, 2)


@pytest.mark.parametrize("frame_size", [(128, 96), (256, 192), (96, 72)])
def test_device_letterbox_by_crop_matches_the_area_resize(frame_size: tuple[int, int]) -> None:
    """The GPU path letterboxes with a box average plus the batched crop; at scales 1/2 and 1/4 that is
    OpenCV's area resize up to rounding, and between them it stays within a few levels."""
    rng = np.random.default_rng(3)
    width, height = frame_size
    noise = [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(2)]
    frames = [np.asarray(cv2.GaussianBlur(image, (0, 0), 1.0), np.uint8) for image in noise]  # camera-like
    host = prepare_detector_input(frames, (64, 64), YUNET)
    by_crop = prepare_detector_input_by_crop(frames, (64, 64), YUNET)
    assert by_crop.shape == host.shape == (2, 3, 64, 64)
    exact_scale = width in (128, 256)
    assert np.abs(by_crop - host).max() <= (1.0 if exact_scale else 12.0)
    assert np.abs(by_crop - host).mean() <= (0.5 if exact_scale else 3.0)
    assert np.all(by_crop[:, :, 48:, :] == 0.0)  # padding below the 64 x 48 image, as on the host


def test_device_letterbox_rejects_mixed_frame_sizes() -> None:
    frames = [np.zeros((96, 128, 3), np.uint8), np.zeros((96, 96, 3), np.uint8)]
    with pytest.raises(InvalidFrameError, match="one size"):
        prepare_detector_input_by_crop(frames, (64, 64), YUNET)
