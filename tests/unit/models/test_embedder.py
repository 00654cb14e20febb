"""Embedder: template alignment, chip normalisation per spec, batching and the distance."""

import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.errors import InvalidFrameError
from models.embedder import (
    Embedder,
    alignment_matrices,
    identity_distance,
    prepare_chips,
)
from models.errors import ModelContractError
from models.registry import get_spec
from tests.fakes import FakeSession, Feeds

DLIB = get_spec("dlib_resnet_128")
DLIB_TEMPLATE = DLIB.template or ()
ARCFACE = get_spec("arcface_w600k_r50")


def rotate_scale_shift(
    points: NDArray[np.float64], angle: float, scale: float, shift: tuple[float, float]
) -> NDArray[np.float64]:
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    return scale * points @ rotation.T + np.asarray(shift)


def test_chips_follow_spec_colour_and_normalisation() -> None:
    frame = np.zeros((400, 400, 3), np.uint8)
    frame[...] = (255, 0, 51)
    points = rotate_scale_shift(np.asarray(DLIB.template, np.float64), 0.0, 2.0, (50.0, 50.0))[None]
    dlib_chips = prepare_chips(frame, points.astype(np.float32), DLIB)
    assert dlib_chips.shape == (1, 3, 150, 150)
    np.testing.assert_allclose(dlib_chips[0, :, 75, 75], [255.0, 0.0, 51.0])  # RGB 0..255, graph normalises
    arcface_chips = prepare_chips(frame, points.astype(np.float32), ARCFACE)
    assert arcface_chips.shape == (1, 3, 112, 112)
    np.testing.assert_allclose(arcface_chips[0, :, 56, 56], [1.0, -1.0, (51 - 127.5) / 127.5], atol=1e-6)


def test_embed_runs_all_faces_in_one_batch() -> None:
    def respond(feeds: Feeds) -> list[NDArray[np.float32]]:
        chips = feeds["input_rgb"]
        return [np.repeat(chips.mean(axis=(1, 2, 3))[:, None], 128, axis=1).astype(np.float32)]

    session = FakeSession.for_spec(DLIB, respond)
    embedder = Embedder(session, DLIB)
    frame = np.zeros((300, 600, 3), np.uint8)
    frame[:, 300:] = 90
    template = np.asarray(DLIB.template, np.float64)
    points = np.stack([template + [20, 20], template + [350, 20]]).astype(np.float32)

    embeddings = embedder.embed(frame, points)

    assert len(session.calls) == 1 and session.calls[0][1]["input_rgb"].shape == (2, 3, 150, 150)
    assert embeddings.shape == (2, 128)
    assert embeddings[0, 0] == pytest.approx(0.0) and embeddings[1, 0] == pytest.approx(90.0)
    assert embedder.embed(frame, np.zeros((0, 5, 2), np.float32)).shape == (0, 128)


def test_identity_distance_is_euclidean() -> None:
    assert identity_distance(np.array([0.0, 3.0]), np.array([4.0, 0.0])) == pytest.approx(5.0)


def test_alignment_matrices_are_batched() -> None:
    points = np.stack([np.asarray(DLIB_TEMPLATE, np.float32)] * 3)
    matrices = alignment_matrices(points, DLIB_TEMPLATE)
    assert matrices.shape == (3, 2, 3)
    np.testing.assert_allclose(matrices[0], np.eye(2, 3), atol=1e-5)  # float32 points


def test_contract_and_frame_checks() -> None:
    session = FakeSession.for_spec(DLIB, lambda feeds: [np.zeros((1, 128), np.float32)])
    with pytest.raises(ModelContractError):
        Embedder(session, get_spec("yunet_n"))
    with pytest.raises(InvalidFrameError):
        Embedder(session, DLIB).embed(np.zeros((10, 10), np.uint8), np.zeros((1, 5, 2), np.float32))
