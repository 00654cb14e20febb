"""Decoder maths on hand-made output tensors (no model files)."""

import math

import numpy as np
import pytest
from numpy.typing import NDArray

from models.detector_decoders import (
    decode_retinaface,
    decode_scrfd,
    decode_yunet,
    decoder_for,
)
from models.errors import ModelContractError

INPUT_SIZE = (64, 64)  # rows: stride 8 -> 64 cells, 16 -> 16, 32 -> 4


def yunet_outputs(input_size: tuple[int, int]) -> dict[str, NDArray[np.float32]]:
    outputs: dict[str, NDArray[np.float32]] = {}
    for stride in (8, 16, 32):
        rows = (input_size[0] // stride) * (input_size[1] // stride)
        outputs[f"cls_{stride}"] = np.zeros((rows, 1), np.float32)
        outputs[f"obj_{stride}"] = np.zeros((rows, 1), np.float32)
        outputs[f"bbox_{stride}"] = np.zeros((rows, 4), np.float32)
        outputs[f"kps_{stride}"] = np.zeros((rows, 10), np.float32)
    return outputs


def test_yunet_decodes_one_cell_in_input_pixels() -> None:
    outputs = yunet_outputs(INPUT_SIZE)
    row, col, cols = 1, 2, 4  # stride 16 grid is 4 x 4
    cell = row * cols + col
    outputs["cls_16"][cell] = 0.81
    outputs["obj_16"][cell] = 1.0
    outputs["bbox_16"][cell] = [0.5, 0.25, math.log(2.0), math.log(3.0)]
    outputs["kps_16"][cell] = [0.1, 0.2, 0.9, 0.2, 0.5, 0.5, 0.2, 0.8, 0.8, 0.8]

    result = decode_yunet(outputs, INPUT_SIZE, 0.6)

    assert result.scores.tolist() == pytest.approx([0.9])
    # centre ((2 + 0.5) * 16, (1 + 0.25) * 16) = (40, 20), size (32, 48)
    np.testing.assert_allclose(result.boxes[0], [24.0, -4.0, 56.0, 44.0], atol=1e-4)
    np.testing.assert_allclose(result.landmarks_5[0, 0], [(2 + 0.1) * 16, (1 + 0.2) * 16], atol=1e-4)
    np.testing.assert_allclose(result.landmarks_5[0, 4], [(2 + 0.8) * 16, (1 + 0.8) * 16], atol=1e-4)


def test_yunet_threshold_uses_geometric_mean_and_clips() -> None:
    outputs = yunet_outputs(INPUT_SIZE)
    outputs["cls_8"][5] = 0.5
    outputs["obj_8"][5] = 0.5  # sqrt(0.25) = 0.5 < 0.6
    outputs["cls_32"][0] = 1.2  # clipped to 1
    outputs["obj_32"][0] = 0.49  # sqrt(0.49) = 0.7

    result = decode_yunet(outputs, INPUT_SIZE, 0.6)

    assert result.scores.tolist() == pytest.approx([0.7])
    assert result.landmarks_5.shape == (1, 5, 2)


def test_scrfd_two_anchors_per_cell_and_distance_boxes() -> None:
    outputs: dict[str, NDArray[np.float32]] = {}
    for stride in (8, 16, 32):
        rows = (64 // stride) ** 2 * 2
        outputs[f"score_{stride}"] = np.zeros((rows, 1), np.float32)
        outputs[f"bbox_{stride}"] = np.zeros((rows, 4), np.float32)
        outputs[f"kps_{stride}"] = np.zeros((rows, 10), np.float32)
    index = (2 * 8 + 3) * 2 + 1  # cell row 2, col 3, second anchor
    outputs["score_8"][index] = 0.7
    outputs["bbox_8"][index] = [1.0, 2.0, 3.0, 4.0]
    outputs["kps_8"][index] = [-1.0, -1.0, 1.0, -1.0, 0.0, 0.0, -1.0, 1.0, 1.0, 1.0]

    result = decode_scrfd(outputs, INPUT_SIZE, 0.5)

    # anchor centre (3 * 8, 2 * 8) = (24, 16), no +0.5
    np.testing.assert_allclose(result.boxes, [[16.0, 0.0, 48.0, 48.0]], atol=1e-4)
    np.testing.assert_allclose(result.landmarks_5[0, 2], [24.0, 16.0], atol=1e-4)
    np.testing.assert_allclose(result.landmarks_5[0, 0], [16.0, 8.0], atol=1e-4)
    assert result.scores.tolist() == pytest.approx([0.7])


def test_retinaface_priors_and_variances() -> None:
    priors = 8 * 8 * 2 + 4 * 4 * 2 + 2 * 2 * 2
    conf = np.zeros((priors, 2), np.float32)
    conf[:, 0] = 1.0
    loc = np.zeros((priors, 4), np.float32)
    landmarks = np.zeros((priors, 10), np.float32)
    index = 128 + (1 * 4 + 2) * 2 + 1  # stride 16, cell row 1 col 2, min size 128
    conf[index] = [0.1, 0.9]
    loc[index] = [0.5, -0.5, 0.0, math.log(0.5) / 0.2]
    landmarks[index, 0:2] = [1.0, 0.0]

    result = decode_retinaface({"loc": loc, "conf": conf, "landmarks": landmarks}, INPUT_SIZE, 0.6)

    # prior centre ((2 + 0.5) * 16, (1 + 0.5) * 16) = (40, 24), size 128
    centre = np.array([40.0 + 0.5 * 0.1 * 128, 24.0 - 0.5 * 0.1 * 128])
    np.testing.assert_allclose(result.boxes[0], [*(centre - [64, 32]), *(centre + [64, 32])], atol=1e-3)
    np.testing.assert_allclose(result.landmarks_5[0, 0], [40.0 + 0.1 * 128, 24.0], atol=1e-3)
    np.testing.assert_allclose(result.landmarks_5[0, 1], [40.0, 24.0], atol=1e-3)
    assert result.scores.tolist() == pytest.approx([0.9])


def test_wrong_row_count_is_a_contract_error() -> None:
    outputs = yunet_outputs((32, 32))
    with pytest.raises(ModelContractError, match="rows"):
        decode_yunet(outputs, INPUT_SIZE, 0.5)


def test_nothing_above_threshold_gives_empty_fixed_shapes() -> None:
    result = decode_yunet(yunet_outputs(INPUT_SIZE), INPUT_SIZE, 0.6)
    assert result.boxes.shape == (0, 4) and result.landmarks_5.shape == (0, 5, 2)


def test_decoder_selection_rejects_unknown_key() -> None:
    assert decoder_for("yunet")[1].nms_threshold == pytest.approx(0.3)
    with pytest.raises(ModelContractError, match="yunet"):
        decoder_for("blazeface")
