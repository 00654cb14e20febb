"""Face analysis with the real models on the real photos: the MANIFEST's expected results as assertions."""

from pathlib import Path

import cv2
import numpy as np
import pytest

from models import detector as detector_module
from models.detector import Detector, fit_input_size
from models.embedder import Embedder, identity_distance
from models.face import Frame
from models.inference import InferenceConfig
from models.landmarks import Landmarker
from models.model_files import ModelStore
from streamer.pipeline.face_selector import select_faces
from streamer.pipeline.face_tracker import FaceTracker, analyse_image, box_iou, landmarks_5_from_mesh

DETECTORS = ("yunet_n", "scrfd_500m", "retinaface_mnet025")
# fr_obama.jpg face box per detector (MANIFEST; RetinaFace measured here)
OBAMA_BOXES = {
    "yunet_n": (371, 85, 607, 421),
    "scrfd_500m": (378, 84, 610, 426),
    "retinaface_mnet025": (376, 87, 603, 421),
}


@pytest.fixture(scope="module")
def store(models_dir: Path) -> ModelStore:
    return ModelStore(models_dir)


@pytest.fixture(scope="module")
def config() -> InferenceConfig:
    return InferenceConfig(intra_op_threads=1)


def load(media_dir: Path, name: str) -> Frame:
    image = cv2.imread(str(media_dir / name), cv2.IMREAD_COLOR)
    assert image is not None, name
    return np.ascontiguousarray(image[..., ::-1])


def detector_for(store: ModelStore, config: InferenceConfig, name: str) -> Detector:
    return Detector(store.session(name, config), store.spec(name))


@pytest.mark.parametrize("name", DETECTORS)
def test_detectors_find_the_manifest_faces(
    store: ModelStore, config: InferenceConfig, media_dir: Path, name: str
) -> None:
    detector = detector_for(store, config, name)

    obama = detector.detect(load(media_dir, "fr_obama.jpg"))
    assert len(obama) == 1
    np.testing.assert_allclose(obama.boxes[0], OBAMA_BOXES[name], atol=12)
    assert len(detector.detect(load(media_dir, "fr_two_people.jpg"))) == 2
    crowd = detector.detect(load(media_dir, "insightface_t1.jpg"))
    assert len(crowd) == 6

    points = crowd.landmarks_5  # InsightFace order whatever the model's native order
    assert np.all(points[:, 0, 0] < points[:, 1, 0])  # eye image-left before eye image-right
    assert np.all(points[:, 3, 0] < points[:, 4, 0])  # mouth corners likewise
    assert np.all(points[:, 2, 1] > points[:, 0:2, 1].mean(axis=1))  # nose below the eyes
    assert np.all(points[:, 3:5, 1].mean(axis=1) > points[:, 2, 1])  # mouth below the nose
    inside = (points >= crowd.boxes[:, None, 0:2]) & (points <= crowd.boxes[:, None, 2:4])
    assert inside.all()


def test_detect_batch_equals_single_detections(
    store: ModelStore, config: InferenceConfig, media_dir: Path
) -> None:
    detector = detector_for(store, config, "yunet_n")
    frame = load(media_dir, "fr_two_people.jpg")
    mirrored = np.ascontiguousarray(frame[:, ::-1])
    batch = detector.detect_batch([frame, mirrored])
    for single, batched in zip((detector.detect(frame), detector.detect(mirrored)), batch):
        np.testing.assert_allclose(batched.boxes, single.boxes, atol=1e-3)
        np.testing.assert_allclose(batched.landmarks_5, single.landmarks_5, atol=1e-3)


def test_facemesh_agrees_with_detector_points(
    store: ModelStore, config: InferenceConfig, media_dir: Path
) -> None:
    detector = detector_for(store, config, "retinaface_mnet025")
    landmarker = Landmarker(store.session("facemesh_468", config), store.spec("facemesh_468"))
    for name in ("fr_obama.jpg", "fr_two_people.jpg", "skimage_astronaut.png", "fr_biden.jpg"):
        frame = load(media_dir, name)
        faces = detector.detect(frame)
        mesh = landmarker.detect(frame, faces.landmarks_5, faces.boxes)
        assert mesh.points.shape == (len(faces), 468, 3) and np.all(mesh.presence > 0.9), name
        widths = faces.boxes[:, 2] - faces.boxes[:, 0]
        for index in range(len(faces)):
            eyes_from_mesh = landmarks_5_from_mesh(mesh.points[index])[0:2]
            error = np.linalg.norm(eyes_from_mesh - faces.landmarks_5[index, 0:2], axis=1) / widths[index]
            assert error.max() < 0.06, (name, error)
    noise = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    box = np.array([[200, 120, 400, 380]], np.float32)
    points = np.array([[[250, 200], [350, 200], [300, 250], [260, 300], [340, 300]]], np.float32)
    assert landmarker.detect(noise, points, box).presence[0] < 0.1


def test_pfld_eyes_near_detector_eyes(store: ModelStore, config: InferenceConfig, media_dir: Path) -> None:
    detector = detector_for(store, config, "yunet_n")
    landmarker = Landmarker(store.session("pfld_68", config), store.spec("pfld_68"))
    frame = load(media_dir, "fr_two_people.jpg")
    faces = detector.detect(frame)
    result = landmarker.detect(frame, faces.landmarks_5, faces.boxes)
    eyes = np.stack(
        [result.points[:, 36:42, 0:2].mean(axis=1), result.points[:, 42:48, 0:2].mean(axis=1)], axis=1
    )
    widths = faces.boxes[:, 2] - faces.boxes[:, 0]
    assert (np.linalg.norm(eyes - faces.landmarks_5[:, 0:2], axis=2) / widths[:, None]).max() < 0.08


def test_dlib_identity_and_reference_selection(
    store: ModelStore, config: InferenceConfig, media_dir: Path
) -> None:
    detector = detector_for(store, config, "yunet_n")
    embedder = Embedder(store.session("dlib_resnet_128", config), store.spec("dlib_resnet_128"))

    def embed_only_face(name: str) -> np.ndarray:
        frame = load(media_dir, name)
        faces = detector.detect(frame)
        assert len(faces) == 1, name
        return embedder.embed(frame, faces.landmarks_5)[0]

    obama, obama2, biden = (embed_only_face(n) for n in ("fr_obama.jpg", "fr_obama2.jpg", "fr_biden.jpg"))
    assert obama.shape == (128,)
    assert identity_distance(obama, obama2) < 0.6
    assert identity_distance(obama, biden) > 0.6

    frame = load(media_dir, "fr_two_people.jpg")  # Obama left, Biden right
    faces = analyse_image(detector, None, frame)
    embeddings = embedder.embed(frame, np.stack([face.landmarks_5 for face in faces]))
    chosen = select_faces(faces, "reference", embeddings=embeddings, reference_embedding=biden)
    assert len(chosen) == 1 and chosen[0].box[0] > frame.shape[1] / 2


def test_tracker_keeps_ids_on_the_real_clip(
    store: ModelStore, config: InferenceConfig, media_dir: Path
) -> None:
    detector = detector_for(store, config, "yunet_n")
    landmarker = Landmarker(store.session("facemesh_468", config), store.spec("facemesh_468"))
    tracker = FaceTracker(detector, landmarker, detect_every=2, detection_width=320)
    capture = cv2.VideoCapture(str(media_dir / "fr_short_hamilton_clip.mp4"))
    per_frame: list[list[int]] = []
    try:
        for _ in range(20):  # the opening shot: two faces, still camera
            ok, image = capture.read()
            assert ok
            faces = tracker.track(np.ascontiguousarray(image[..., ::-1]))
            per_frame.append([face.track_id for face in faces])
            assert all(face.mesh is not None and face.mesh.shape == (468, 3) for face in faces)
    finally:
        capture.release()
    assert tracker.detections_run == 10
    assert all(ids == [0, 1] for ids in per_frame), per_frame


def test_analyse_image_on_a_small_photo(store: ModelStore, config: InferenceConfig, media_dir: Path) -> None:
    detector = detector_for(store, config, "yunet_n")
    landmarker = Landmarker(store.session("facemesh_468", config), store.spec("facemesh_468"))
    faces = analyse_image(detector, landmarker, load(media_dir, "fr_obama_small.jpg"))
    assert len(faces) == 1 and faces[0].mesh is not None


@pytest.mark.parametrize("name", DETECTORS)
def test_device_letterbox_finds_the_same_faces(
    store: ModelStore, config: InferenceConfig, media_dir: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU path's letterbox (one batched bilinear crop, run here by its CPU mirror) detects what the
    host's area resize detects, at the tracker's 320-px width (scale 1/2 to 1/4 on these photos)."""
    detector = detector_for(store, config, name)
    images = [load(media_dir, photo) for photo in ("fr_obama.jpg", "fr_two_people.jpg", "insightface_t1.jpg")]
    sizes = [fit_input_size((image.shape[1], image.shape[0]), 320) for image in images]
    host = [detector.detect(image, input_size=size) for image, size in zip(images, sizes)]
    monkeypatch.setattr(detector_module, "is_device_array", lambda array: True)
    by_crop = [detector.detect(image, input_size=size) for image, size in zip(images, sizes)]
    for expected, found in zip(host, by_crop):
        assert len(found) == len(expected)
        order = np.argmax(box_iou(expected.boxes, found.boxes), axis=1)
        assert np.diag(box_iou(expected.boxes, found.boxes[order])).min() > 0.85
        face_sizes = (expected.boxes[:, 2] - expected.boxes[:, 0])[:, None, None]
        assert (np.abs(found.landmarks_5[order] - expected.landmarks_5) / face_sizes).max() < 0.05
