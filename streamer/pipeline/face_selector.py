"""Which of the tracked faces get swapped: all of them, the largest one, or those matching a reference.

"reference" compares each face's identity embedding (same embedder as the reference, e.g. dlib 128-d)
with the reference embedding by euclidean distance and keeps those within `reference_distance`
(dlib's same-person threshold is 0.6), nearest first.
"""

import logging
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from gpu_ops.errors import InvalidInputError
from models.face import TrackedFace
from streamer.pipeline.choices import FACE_SELECTOR_MODES, FaceSelectorMode

logger = logging.getLogger(__name__)


def reference_distances(
    embeddings: NDArray[np.floating], reference_embedding: NDArray[np.floating]
) -> NDArray[np.float64]:
    """[N] euclidean distances of each face's embedding [N,D] to the reference [D]."""
    difference = np.asarray(embeddings, np.float64) - np.asarray(reference_embedding, np.float64)[None, :]
    return np.asarray(np.linalg.norm(difference, axis=1))


def select_faces(
    faces: Sequence[TrackedFace],
    mode: FaceSelectorMode,
    *,
    embeddings: NDArray[np.floating] | None = None,
    reference_embedding: NDArray[np.floating] | None = None,
    reference_distance: float = 0.6,
) -> list[TrackedFace]:
    """The faces to swap. "many": all, in the given order; "one": the largest (by box area);
    "reference": faces whose `embeddings` row is within `reference_distance` of `reference_embedding`,
    nearest first (both are required in this mode)."""
    if mode == "many":
        return list(faces)
    if mode == "one":
        return [max(faces, key=lambda face: face.area)] if faces else []
    if mode != "reference":
        raise InvalidInputError(f"face selector must be one of {list(FACE_SELECTOR_MODES)}, got {mode!r}")
    if embeddings is None or reference_embedding is None:
        raise InvalidInputError(
            "face selector 'reference' needs the faces' embeddings and a reference embedding"
        )
    if len(embeddings) != len(faces):
        raise InvalidInputError(f"{len(embeddings)} embeddings for {len(faces)} faces")
    if not faces:
        return []
    distances = reference_distances(embeddings, reference_embedding)
    order = np.argsort(distances, kind="stable")
    return [faces[int(index)] for index in order if distances[index] <= reference_distance]
