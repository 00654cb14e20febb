"""The MediaPipe hand and person models on the shared photos: real hands found, skin false positives gone."""

from pathlib import Path

import cv2
import numpy as np
import pytest

from models.hands import HandFinder
from models.inference import InferenceConfig
from models.model_files import ModelStore
from models.segmentation import PersonSegmenter

CONFIG = InferenceConfig(execution_provider="cpu", intra_op_threads=1)


def _photo(media_dir: Path, name: str) -> np.ndarray:
    image = cv2.imread(str(media_dir / name))
    assert image is not None, name
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


@pytest.fixture(scope="module")
def hands(models_dir: Path) -> HandFinder:
    store = ModelStore(models_dir)
    return HandFinder(
        store.session("palm_lite", CONFIG),
        store.spec("palm_lite"),
        store.session("hand_landmark_lite", CONFIG),
        store.spec("hand_landmark_lite"),
    )


def test_the_hand_holding_a_microphone_is_found_with_its_fingers(hands: HandFinder, media_dir: Path) -> None:
    image = _photo(media_dir, "fr_lin_manuel_miranda.png")
    found = hands.find(image)
    assert len(found) == 1 and found[0].presence > 0.9
    points = found[0].points[:, :2]
    # the hand is in the lower right of the photo, its 21 points spread over a hand-sized area
    assert 430 < points[:, 0].mean() < 620 and 480 < points[:, 1].mean() < 612
    assert 30 < np.ptp(points[:, 0]) < 250 and 30 < np.ptp(points[:, 1]) < 250


def test_a_palm_false_positive_on_a_face_is_rejected_by_presence(hands: HandFinder, media_dir: Path) -> None:
    image = _photo(media_dir, "fr_biden2.jpg")
    palms = hands.palms(image)
    assert palms and palms[0].score > 0.5  # the detector alone fires on the side of the face
    assert hands.landmarks(image, palms[0]).presence < 0.1
    assert hands.find(image) == []


def test_a_face_only_photo_has_no_hands(hands: HandFinder, media_dir: Path) -> None:
    assert hands.find(_photo(media_dir, "skimage_astronaut.png")) == []


@pytest.mark.parametrize("name", ["selfie_seg_256", "selfie_seg_landscape"])
def test_person_mask_covers_the_face_and_not_the_corner(models_dir: Path, media_dir: Path, name: str) -> None:
    store = ModelStore(models_dir)
    segmenter = PersonSegmenter(store.session(name, CONFIG), store.spec(name))
    image = _photo(media_dir, "fr_obama.jpg")
    probability = segmenter.person_probability(image)
    assert probability.shape == image.shape[:2] and probability.dtype == np.float32
    gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    faces = cv2.CascadeClassifier(
        cv2.data.haarcascades + "haarcascade_frontalface_default.xml"  # type: ignore[attr-defined]
    ).detectMultiScale(gray, 1.1, 5, minSize=(100, 100))
    x, y, w, h = max(faces, key=lambda face: face[2] * face[3])
    assert probability[y + h // 4 : y + 3 * h // 4, x + w // 4 : x + 3 * w // 4].mean() > 0.9
    assert probability[:40, :40].mean() < 0.2
