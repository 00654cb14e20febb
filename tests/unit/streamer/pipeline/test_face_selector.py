"""Face selection modes: many, one (largest), reference (within distance, nearest first)."""

import numpy as np
import pytest

from gpu_ops.errors import InvalidInputError
from models.face import TrackedFace
from streamer.pipeline.face_selector import select_faces


def face(track_id: int, size: float) -> TrackedFace:
    return TrackedFace(
        track_id=track_id,
        box=np.array([0.0, 0.0, size, size], np.float32),
        score=0.9,
        landmarks_5=np.zeros((5, 2), np.float32),
    )


FACES = [face(0, 50.0), face(1, 120.0), face(2, 80.0)]


def test_many_keeps_all_in_order() -> None:
    assert [f.track_id for f in select_faces(FACES, "many")] == [0, 1, 2]


def test_one_keeps_the_largest() -> None:
    assert [f.track_id for f in select_faces(FACES, "one")] == [1]
    assert select_faces([], "one") == []


def test_reference_keeps_faces_within_distance_nearest_first() -> None:
    reference = np.zeros(128, np.float32)
    embeddings = np.zeros((3, 128), np.float32)
    embeddings[0, 0] = 0.5
    embeddings[1, 0] = 0.9
    embeddings[2, 1] = 0.3
    selected = select_faces(FACES, "reference", embeddings=embeddings, reference_embedding=reference)
    assert [f.track_id for f in selected] == [2, 0]
    wider = select_faces(
        FACES, "reference", embeddings=embeddings, reference_embedding=reference, reference_distance=1.0
    )
    assert [f.track_id for f in wider] == [2, 0, 1]


def test_reference_needs_matching_embeddings() -> None:
    with pytest.raises(InvalidInputError, match="needs"):
        select_faces(FACES, "reference")
    with pytest.raises(InvalidInputError, match="2 embeddings for 3 faces"):
        select_faces(FACES, "reference", embeddings=np.zeros((2, 4)), reference_embedding=np.zeros(4))
    assert select_faces([], "reference", embeddings=np.zeros((0, 4)), reference_embedding=np.zeros(4)) == []


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(InvalidInputError):
        select_faces(FACES, "all")  # type: ignore[arg-type]
