"""Palm decoding without the model: anchors, the letterbox and the hand ROI geometry."""

import numpy as np

from models.hands import ROI_SCALE, Palm, decode_palms, letterbox, palm_anchors, roi_matrix


def test_anchors_are_two_per_cell_at_stride_8_and_six_at_stride_16() -> None:
    anchors = palm_anchors()
    assert anchors.shape == (2016, 2)
    assert np.allclose(anchors[0], anchors[1]) and np.allclose(anchors[0], [0.5 / 24, 0.5 / 24])
    assert np.allclose(anchors[1152:1158], [0.5 / 12, 0.5 / 12])


def test_one_strong_anchor_decodes_to_its_box_and_weak_ones_drop() -> None:
    regressors = np.zeros((2016, 18), np.float32)
    logits = np.full((2016,), -5.0, np.float32)
    regressors[100, 0:4] = (3.0, -2.0, 40.0, 30.0)
    regressors[101, 0:4] = (3.0, -2.0, 40.0, 30.0)  # the same box again: merged by NMS
    logits[100], logits[101] = 3.0, 2.0
    found = decode_palms(regressors, logits)
    anchor = palm_anchors()[100]
    assert found.shape == (1, 19)
    assert np.allclose(found[0, 0:2], anchor + np.array([3.0, -2.0]) / 192, atol=1e-6)
    assert np.allclose(found[0, 2:4], np.array([40.0, 30.0]) / 192)
    assert abs(found[0, 18] - 1 / (1 + np.exp(-3.0))) < 1e-6


def test_letterbox_keeps_the_aspect_and_centres_the_frame() -> None:
    frame = np.full((100, 200, 3), 255, np.uint8)
    square, scale, offset = letterbox(frame, 192)
    assert scale == 192 / 200 and tuple(offset) == (0, 48)
    assert square[0, 47].max() == 0 and square[0, 48:144].min() == 1.0


def test_upright_hand_roi_is_centred_above_the_palm_with_fingers_up() -> None:
    palm = Palm(
        centre=np.array([100.0, 100.0], np.float32),
        size=np.array([40.0, 40.0], np.float32),
        points=np.array([[100, 120], [0, 0], [100, 80], [0, 0], [0, 0], [0, 0], [0, 0]], np.float32),
        score=0.9,
    )
    matrix = roi_matrix(palm, 224)
    # the fingers point up in the frame: no rotation, centre moved 20 px up, side 2.6 x 40
    assert np.allclose(matrix[:, :2], np.eye(2) * 224 / (ROI_SCALE * 40), atol=1e-9)
    centre_in_crop = matrix[:, :2] @ np.array([100.0, 80.0]) + matrix[:, 2]
    assert np.allclose(centre_in_crop, [112, 112])
