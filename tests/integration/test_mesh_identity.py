"""The mesh engine moves identity: a swapped face is recognised as the source person, not the target.

For every ordered pair of photos of two different people (obama, biden, alex_lacamoire: at least two
photos each), photo A of P is swapped onto photo B of Q; the dlib embedding of the swapped face must be
closer (mean distance) to P's other photos (not A) than to Q's other photos (not B) in >= 95 % of pairs,
with the source's eyes and mouth (mouth_mask off) and with the target's eyes and inner mouth kept (on).
Run with -s to see the rate and the mean distances.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from models.detector import Detector
from models.embedder import Embedder, identity_distance
from models.face import Frame, TrackedFace
from models.inference import InferenceConfig
from models.landmarks import Landmarker
from models.model_files import ModelStore
from models.registry import get_spec
from streamer.pipeline.swap_engines.base import SwapOptions
from streamer.pipeline.swap_engines.mesh import MeshEngine
from streamer.pipeline.swap_engines.mesh_source import MeshSource

MAX_SIDE = 960  # photos are reduced to this (faces stay large; tests stay quick)

# (person, file, which face: None = the only one, "left"/"right" in a two-person photo)
PHOTOS: tuple[tuple[str, str, str | None], ...] = (
    ("obama", "fr_obama.jpg", None),
    ("obama", "fr_obama2.jpg", None),
    ("obama", "fr_obama3.jpg", None),
    ("obama", "fr_obama_small.jpg", None),
    ("obama", "fr_two_people.jpg", "left"),
    ("biden", "fr_biden.jpg", None),
    ("biden", "fr_biden2.jpg", None),
    ("biden", "fr_two_people.jpg", "right"),
    ("alex_lacamoire", "fr_alex_lacamoire.png", None),
    ("alex_lacamoire", "fr_alex_lacamoire1.jpg", None),
    ("alex_lacamoire", "fr_alex_lacamoire2.jpg", None),
)


@dataclass(frozen=True)
class Photo:
    person: str
    label: str
    image: Frame
    face: TrackedFace


@dataclass(frozen=True)
class Models:
    engine: MeshEngine
    detector: Detector
    landmarker: Landmarker
    embedder: Embedder


@pytest.fixture(scope="module")
def models(models_dir: Path) -> Models:
    store = ModelStore(models_dir)
    config = InferenceConfig(intra_op_threads=2)
    detector = Detector(store.session("yunet_n", config), get_spec("yunet_n"))
    landmarker = Landmarker(store.session("facemesh_468", config), get_spec("facemesh_468"))
    embedder = Embedder(store.session("dlib_resnet_128", config), get_spec("dlib_resnet_128"))
    return Models(MeshEngine(detector, landmarker), detector, landmarker, embedder)


def load_photo(media_dir: Path, file_name: str) -> Frame:
    image = cv2.imread(str(media_dir / file_name), cv2.IMREAD_COLOR)
    assert image is not None, file_name
    scale = min(1.0, MAX_SIDE / max(image.shape[:2]))
    if scale < 1.0:
        image = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(cv2.cvtColor(image, cv2.COLOR_BGR2RGB))


def find_face(models: Models, image: Frame, which: str | None) -> TrackedFace:
    detections = models.detector.detect(image)
    assert len(detections) >= 1
    centres = (detections.boxes[:, 0] + detections.boxes[:, 2]) / 2
    areas = (detections.boxes[:, 2] - detections.boxes[:, 0]) * (
        detections.boxes[:, 3] - detections.boxes[:, 1]
    )
    index = int(
        np.argmax(areas) if which is None else np.argmin(centres) if which == "left" else np.argmax(centres)
    )
    landmarks = models.landmarker.detect(
        image, detections.landmarks_5[index : index + 1], detections.boxes[index : index + 1]
    )
    return TrackedFace(
        index,
        detections.boxes[index],
        float(detections.scores[index]),
        detections.landmarks_5[index],
        landmarks.points[0],
    )


@pytest.fixture(scope="module")
def photos(models: Models, media_dir: Path) -> list[Photo]:
    result = []
    for person, file_name, which in PHOTOS:
        image = load_photo(media_dir, file_name)
        result.append(Photo(person, f"{file_name}:{which or 'face'}", image, find_face(models, image, which)))
    return result


def source_image(photo: Photo) -> Frame:
    """The photo cut to its own face's half when it holds two people (prepare_source takes the largest)."""
    if photo.label.endswith(":face"):
        return photo.image
    middle = photo.image.shape[1] // 2
    half = photo.image[:, :middle] if photo.label.endswith(":left") else photo.image[:, middle:]
    return np.ascontiguousarray(half)


def embed(models: Models, image: Frame, face: TrackedFace) -> NDArray[np.float32]:
    return models.embedder.embed(image, face.landmarks_5[None])[0]


def ordered_pairs(photos: list[Photo]) -> Iterator[tuple[Photo, Photo]]:
    for source in photos:
        for target in photos:
            if source.person != target.person:
                yield source, target


@pytest.mark.slow
@pytest.mark.parametrize("mouth_mask", [False, True], ids=["source-eyes-mouth", "target-eyes-mouth"])
def test_swapped_face_is_recognised_as_the_source_person(
    models: Models, photos: list[Photo], mouth_mask: bool
) -> None:
    embeddings = {photo.label: embed(models, photo.image, photo.face) for photo in photos}
    sources: dict[str, MeshSource] = {p.label: models.engine.prepare_source(source_image(p)) for p in photos}
    moved, total = 0, 0
    source_distances, target_distances, failures = [], [], []
    for source, target in ordered_pairs(photos):
        swapped = models.engine.swap(
            target.image, [target.face], sources[source.label], SwapOptions(mouth_mask=mouth_mask)
        )
        embedding = embed(models, swapped, target.face)
        to_source = np.mean(
            [
                identity_distance(embedding, embeddings[p.label])
                for p in photos
                if p.person == source.person and p is not source
            ]
        )
        to_target = np.mean(
            [
                identity_distance(embedding, embeddings[p.label])
                for p in photos
                if p.person == target.person and p is not target
            ]
        )
        source_distances.append(to_source)
        target_distances.append(to_target)
        total += 1
        if to_source < to_target:
            moved += 1
        else:
            failures.append(f"{source.label} -> {target.label}: {to_source:.3f} vs {to_target:.3f}")
    rate = moved / total
    print(
        f"\nmesh identity (mouth_mask={mouth_mask}): moved in {moved}/{total} pairs ({rate:.1%}); mean distance to source person "
        f"{np.mean(source_distances):.3f}, to target person {np.mean(target_distances):.3f}"
    )
    for failure in failures:
        print("  not moved:", failure)
    assert total == 78
    assert rate >= 0.95
