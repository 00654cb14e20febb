"""streamer/pipeline/swap_engines/inswapper.py end to end on synthetic look-alikes of inswapper/gfpgan."""

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest
from numpy.typing import NDArray

from gpu_ops.affine import estimate_similarity, invert_affine, transform_points
from gpu_ops.backend import cupy_available
from gpu_ops.errors import InvalidInputError
from models.batch_conversion import convert_to_dynamic_batch
from models.embedder import Embedder
from models.enhancer import Enhancer
from models.face import TrackedFace
from models.face_mesh_topology import LIPS_INNER, VERTEX_COUNT
from models.inference import InferenceConfig
from models.model_files import ModelStore
from models.registry import ARCFACE_112_TEMPLATE, INSWAPPER_128_TEMPLATE, get_spec
from models.swapper import Swapper, extract_emap, face_alignments, source_latent
from streamer.pipeline.swap_engines.base import NoFaceError, SwapOptions
from streamer.pipeline.swap_engines.inswapper import InswapperEngine, InswapperSource, SwapItem
from tests import synthetic_models

HEIGHT, WIDTH = 240, 320


@dataclass(frozen=True)
class FakeDetections:
    boxes: NDArray[np.float32]
    landmarks_5: NDArray[np.float32]

    def __len__(self) -> int:
        return len(self.boxes)


class FakeDetector:
    def __init__(self, faces: list[TrackedFace]) -> None:
        self.faces = faces

    def detect(self, frame: NDArray[np.uint8]) -> FakeDetections:
        boxes = np.array([face.box for face in self.faces], np.float32).reshape(-1, 4)
        points = np.array([face.landmarks_5 for face in self.faces], np.float32).reshape(-1, 5, 2)
        return FakeDetections(boxes, points)


class FakeEmbedder:
    """Embedding = a seeded vector per face, keyed by the face's nose x (so each face is a person)."""

    def __init__(self) -> None:
        self.calls: list[NDArray[np.float32]] = []

    def embed(self, frame: NDArray[np.uint8], landmarks_5: NDArray[np.float32]) -> NDArray[np.float32]:
        self.calls.append(landmarks_5)
        return np.stack([person(int(points[2, 0])) for points in landmarks_5])


def person(seed: int) -> NDArray[np.float32]:
    return (np.random.default_rng(seed).standard_normal(512) * 20).astype(np.float32)


def smooth_frame(phase: float = 0.0) -> NDArray[np.uint8]:
    """Low-frequency colours: resampling it twice changes nothing beyond rounding."""
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    red = 60 + 0.4 * x + 20 * np.sin(x / 23 + phase)
    green = 40 + 0.5 * y + 20 * np.cos(y / 19 + phase)
    blue = 128 + 50 * np.sin((x + y) / 41)
    return np.ascontiguousarray(np.rint(np.stack([red, green, blue], -1)).clip(0, 255).astype(np.uint8))


def make_face(track_id: int, scale: float, angle_deg: float, centre: tuple[float, float]) -> TrackedFace:
    """A face whose 128-px swapper crop is `scale` frame px per crop px, rotated, centred at `centre`."""
    template = np.asarray(INSWAPPER_128_TEMPLATE, np.float32) - 64.0
    angle = np.deg2rad(angle_deg)
    rotation = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]], np.float32)
    points = (template @ rotation.T + np.asarray(centre, np.float32)).astype(np.float32)
    half = 64 * scale
    box = np.array([centre[0] - half, centre[1] - half, centre[0] + half, centre[1] + half], np.float32)
    return TrackedFace(track_id=track_id, box=box, score=0.9, landmarks_5=points)


def footprint(face: TrackedFace) -> NDArray[np.bool_]:
    """Frame pixels the face's 128-px crop can touch (its corners mapped back to the frame, +1 px)."""
    template = np.asarray(INSWAPPER_128_TEMPLATE, np.float32)
    points = face.landmarks_5
    scale = np.linalg.norm(points[1] - points[0]) / np.linalg.norm(template[1] - template[0])
    reach = 64 * scale * np.sqrt(2) + 2
    centre = points.mean(0) + (np.array([64, 64]) - template.mean(0)) * scale
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    return (np.abs(x - centre[0]) <= reach) & (np.abs(y - centre[1]) <= reach)


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def make_engine(
    path: Path, *, model: str = "inswapper_128", faces: list[TrackedFace] | None = None, **kwargs: object
) -> InswapperEngine:
    swapper = Swapper(_session(path), get_spec(model), extract_emap(path))
    return InswapperEngine(FakeDetector(faces or []), FakeEmbedder(), swapper, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def identity_model(tmp_path: Path) -> Path:
    return synthetic_models.build_inswapper(tmp_path / "identity.onnx", kind="identity")


@pytest.fixture
def latent_model(tmp_path: Path) -> Path:
    return synthetic_models.build_inswapper(tmp_path / "latent.onnx", kind="latent_dependent")


FACES = [make_face(1, 1.1, 8.0, (110, 120)), make_face(2, 0.6, -15.0, (240, 100))]


def test_required_models() -> None:
    assert InswapperEngine.required_models("inswapper_128_fp16") == (
        "inswapper_128_fp16",
        "arcface_w600k_r50",
    )
    assert InswapperEngine.required_models() == ("inswapper_128", "arcface_w600k_r50")


def test_prepare_source_embeds_the_largest_face_and_derives_the_latent(identity_model: Path) -> None:
    engine = make_engine(identity_model, faces=[FACES[1], FACES[0]])
    source = engine.prepare_source(smooth_frame())
    assert isinstance(source, InswapperSource) and source.engine == "inswapper"
    np.testing.assert_array_equal(source.landmarks_5, FACES[0].landmarks_5)  # the larger of the two
    expected_embedding = person(int(FACES[0].landmarks_5[2, 0]))
    np.testing.assert_array_equal(source.embedding, expected_embedding)
    np.testing.assert_allclose(
        source.latent, source_latent(expected_embedding, engine.swapper.emap), atol=1e-6
    )


def test_prepare_source_without_a_face_raises(identity_model: Path) -> None:
    with pytest.raises(NoFaceError):
        make_engine(identity_model, faces=[]).prepare_source(smooth_frame())


def test_identity_swapper_returns_the_frame_within_one_level(identity_model: Path) -> None:
    engine = make_engine(identity_model, faces=FACES)
    frame = smooth_frame()
    untouched = frame.copy()
    output = engine.swap(frame, FACES, engine.prepare_source(frame), SwapOptions())
    assert np.array_equal(frame, untouched)  # the input is never written
    assert output is not frame and output.shape == frame.shape and output.dtype == np.uint8
    difference = np.abs(output.astype(int) - frame.astype(int))
    assert difference.max() <= 1
    assert difference.any()  # the faces really went through the swapper and paste-back


def test_swapped_faces_change_only_inside_their_footprint(latent_model: Path) -> None:
    engine = make_engine(latent_model, faces=FACES)
    frame = smooth_frame()
    source = engine.prepare_source(frame)
    output = engine.swap(frame, FACES, source, SwapOptions())
    inside = footprint(FACES[0]) | footprint(FACES[1])
    assert np.array_equal(output[~inside], frame[~inside])
    # at a face centre the mask is 1, so the pixel is the swapper's: target + 0.25 * tanh(latent @ W)
    shift = synthetic_models.LATENT_SHIFT_SCALE * np.tanh(
        source.latent @ synthetic_models.latent_dependent_weights()
    )
    expected = np.clip(frame[120, 110].astype(np.float32) + shift * 255.0, 0, 255)
    assert np.abs(output[120, 110].astype(np.float32) - expected).max() <= 2.0
    assert np.abs(output[120, 110].astype(int) - frame[120, 110].astype(int)).max() > 10


def test_no_faces_returns_an_unchanged_copy(identity_model: Path) -> None:
    engine = make_engine(identity_model, faces=FACES)
    frame = smooth_frame()
    output = engine.swap(frame, [], engine.prepare_source(frame), SwapOptions())
    assert output is not frame and np.array_equal(output, frame)


def test_batch_over_faces_and_frames_equals_one_by_one(latent_model: Path, tmp_path: Path) -> None:
    single = make_engine(latent_model, faces=FACES)
    batched = make_engine(convert_to_dynamic_batch(latent_model, tmp_path), faces=FACES)
    calls: list[int] = []
    forward = batched.swapper.forward

    def recording(target: NDArray[np.float32], source: NDArray[np.float32]) -> NDArray[np.float32]:
        calls.append(len(target))
        return forward(target, source)

    batched.swapper.forward = recording  # type: ignore[method-assign]
    sources = [
        single.prepare_source(smooth_frame()),
        InswapperSource(person(5), source_latent(person(5), single.swapper.emap), FACES[0].landmarks_5),
    ]
    items = [
        SwapItem(smooth_frame(0.0), FACES, sources[0], SwapOptions()),
        SwapItem(smooth_frame(0.7), FACES[:1], sources[1], SwapOptions()),
        SwapItem(smooth_frame(1.3), [], sources[0], SwapOptions()),
        SwapItem(smooth_frame(2.1), FACES[::-1], sources[1], SwapOptions()),
    ]
    together = batched.swap_batch(items)
    assert calls == [8]  # 5 faces of 4 frames in one session call (bucket 8)
    for item, output in zip(items, together):
        assert np.array_equal(output, single.swap(item.frame, item.faces, item.source, item.options))
    assert not np.array_equal(together[1], together[3][:, :, :])  # different sources, different results
    plain_tuples = batched.swap_batch([tuple(item) for item in items[:2]])  # type: ignore[misc]
    assert all(np.array_equal(a, b) for a, b in zip(plain_tuples, together[:2]))


def test_fp16_variant_swaps_like_fp32(tmp_path: Path) -> None:
    path = synthetic_models.build_inswapper(tmp_path / "fp16.onnx", kind="identity", fp16_weights=True)
    engine = make_engine(path, model="inswapper_128_fp16", faces=FACES)
    frame = smooth_frame()
    output = engine.swap(frame, FACES, engine.prepare_source(frame), SwapOptions())
    assert np.abs(output.astype(int) - frame.astype(int)).max() <= 2  # fp16 adds < 1 level of rounding


def test_source_from_another_engine_is_refused(identity_model: Path) -> None:
    @dataclass(frozen=True)
    class MeshSource:
        engine: str = "mesh"

    engine = make_engine(identity_model, faces=FACES)
    with pytest.raises(InvalidInputError, match="mesh"):
        engine.swap(smooth_frame(), FACES, MeshSource(), SwapOptions())  # type: ignore[arg-type]


def test_enhancer_runs_every_nth_batch_and_only_when_asked(identity_model: Path, tmp_path: Path) -> None:
    gfpgan = synthetic_models.build_gfpgan(tmp_path / "gfpgan.onnx")
    enhancer = Enhancer(_session(gfpgan), get_spec("gfpgan_1.4"))
    calls: list[int] = []
    forward = enhancer.forward

    def recording(batch: NDArray[np.float32]) -> NDArray[np.float32]:
        calls.append(len(batch))
        return forward(batch)

    enhancer.forward = recording  # type: ignore[method-assign]
    engine = make_engine(identity_model, faces=FACES, enhancer=enhancer, enhance_every=2)
    frame = smooth_frame()
    source = engine.prepare_source(frame)
    for _ in range(4):
        output = engine.swap(frame, FACES, source, SwapOptions(enhance=True))
        assert np.abs(output.astype(int) - frame.astype(int)).max() <= 3
    assert calls == [1, 1, 1, 1]  # batches 0 and 2, two faces each, fixed-batch enhancer: one call per face
    calls.clear()
    engine.swap(frame, FACES, source, SwapOptions(enhance=False))
    engine.swap(frame, FACES, source, SwapOptions(enhance=False))
    assert calls == []


def test_bad_enhance_every_is_refused(identity_model: Path) -> None:
    with pytest.raises(InvalidInputError, match="enhance_every"):
        make_engine(identity_model, enhance_every=0)


def with_open_mouth(face: TrackedFace) -> tuple[TrackedFace, tuple[int, int]]:
    """The face plus a mesh whose inner lips are an open ellipse at crop (64, 100); returns its frame centre."""
    angles = np.linspace(0, 2 * np.pi, len(LIPS_INNER), endpoint=False)
    crop_lips = np.stack([64 + 14 * np.cos(angles), 100 + 7 * np.sin(angles)], -1).astype(np.float32)
    to_frame = invert_affine(face_alignments(face.landmarks_5[None], get_spec("inswapper_128"))[0])
    mesh = np.zeros((VERTEX_COUNT, 3), np.float32)
    mesh[list(LIPS_INNER), :2] = transform_points(crop_lips, to_frame)
    centre = transform_points(np.array([[64.0, 100.0]], np.float32), to_frame)[0]
    face = TrackedFace(face.track_id, face.box, face.score, face.landmarks_5, mesh=mesh)
    return face, (round(float(centre[0])), round(float(centre[1])))


def test_mouth_mask_keeps_the_targets_open_mouth(latent_model: Path) -> None:
    face, (mouth_x, mouth_y) = with_open_mouth(FACES[0])
    engine = make_engine(latent_model, faces=[face])
    frame = smooth_frame()
    source = engine.prepare_source(frame)
    kept = engine.swap(frame, [face], source, SwapOptions(mouth_mask=True))
    swapped = engine.swap(frame, [face], source, SwapOptions(mouth_mask=False))
    no_mesh = engine.swap(frame, FACES[:1], source, SwapOptions(mouth_mask=True))
    assert np.abs(kept[mouth_y, mouth_x].astype(int) - frame[mouth_y, mouth_x].astype(int)).max() <= 1
    assert np.abs(swapped[mouth_y, mouth_x].astype(int) - frame[mouth_y, mouth_x].astype(int)).max() > 10
    assert np.array_equal(no_mesh, swapped)  # without a tracked mesh there is no mouth to keep
    cheek_x, cheek_y = 110, 110  # above the mouth, inside the face: swapped either way
    assert np.array_equal(kept[cheek_y, cheek_x], swapped[cheek_y, cheek_x])


def test_prepare_source_with_the_arcface_lookalike(identity_model: Path, tmp_path: Path) -> None:
    arcface = synthetic_models.build_arcface(tmp_path / "arcface.onnx")
    embedder = Embedder(_session(arcface), get_spec("arcface_w600k_r50"))
    swapper = Swapper(_session(identity_model), get_spec("inswapper_128"), extract_emap(identity_model))
    engine = InswapperEngine(FakeDetector(FACES[:1]), embedder, swapper)  # type: ignore[arg-type]
    frame = smooth_frame()
    source = engine.prepare_source(frame)
    # reference: the 112-px chip on the arcface template, (x - 127.5) / 127.5, then the look-alike's maths
    matrix = estimate_similarity(FACES[0].landmarks_5, np.asarray(ARCFACE_112_TEMPLATE, np.float32))
    chip = (cv2.warpAffine(frame, matrix, (112, 112)).astype(np.float32) - 127.5) / 127.5
    pooled = chip.transpose(2, 0, 1).reshape(3, 7, 16, 7, 16).mean(axis=(2, 4)).reshape(-1)
    expected = pooled @ synthetic_models.arcface_weights()
    np.testing.assert_allclose(source.embedding, expected, rtol=1e-3, atol=2e-2)
    np.testing.assert_allclose(source.latent, source_latent(expected, swapper.emap), atol=1e-3)


@dataclass(frozen=True)
class ModelNames:
    swapper_model: str = "inswapper_128_fp16"
    enhancer_model: str = "gfpgan_1.4"


def test_from_store_loads_the_batched_swapper_arcface_and_enhancer(tmp_path: Path) -> None:
    models = tmp_path / "models"
    synthetic_models.build_inswapper(
        models / "inswapper_128_fp16.onnx", kind="latent_dependent", fp16_weights=True
    )
    synthetic_models.build_arcface(models / "arcface_w600k_r50.onnx")
    synthetic_models.build_gfpgan(models / "gfpgan_1.4.onnx")
    store = ModelStore(models)
    for name in ("inswapper_128_fp16", "arcface_w600k_r50", "gfpgan_1.4"):
        store.pin(name)  # these rows have no registered hash: the user pins their downloads
    cache = tmp_path / "converted"
    detector = FakeDetector(FACES[:1])
    engine = InswapperEngine.from_store(store, InferenceConfig(), detector, ModelNames(), cache_dir=cache)
    assert engine.swapper.supports_batch and engine.swapper.spec.name == "inswapper_128_fp16"
    assert engine.enhancer is not None and engine.enhancer.supports_batch
    np.testing.assert_allclose(engine.swapper.emap, synthetic_models.emap_matrix(), atol=1e-3)
    frame = smooth_frame()
    output = engine.swap(frame, FACES, engine.prepare_source(frame), SwapOptions(enhance=True))
    assert np.abs(output[120, 110].astype(int) - frame[120, 110].astype(int)).max() > 10
    converted = sorted(path.name for path in cache.iterdir())
    assert len(converted) == 2
    (models / "gfpgan_1.4.onnx").unlink()
    again = InswapperEngine.from_store(store, InferenceConfig(), detector, ModelNames(), cache_dir=cache)
    assert again.enhancer is None
    assert sorted(path.name for path in cache.iterdir()) == converted  # the swapper copy was reused


def test_from_store_falls_back_to_batch_1_when_conversion_is_refused(tmp_path: Path) -> None:
    models = tmp_path / "models"
    synthetic_models.build_inswapper(models / "inswapper_128_fp16.onnx", kind="batch_folding")
    synthetic_models.build_arcface(models / "arcface_w600k_r50.onnx")
    store = ModelStore(models)
    store.pin("inswapper_128_fp16")
    store.pin("arcface_w600k_r50")
    engine = InswapperEngine.from_store(
        store, InferenceConfig(), FakeDetector(FACES), ModelNames(), cache_dir=tmp_path / "converted"
    )
    assert not engine.swapper.supports_batch and engine.enhancer is None
    frame = smooth_frame()
    output = engine.swap(frame, FACES, engine.prepare_source(frame), SwapOptions())
    assert np.abs(output.astype(int) - frame.astype(int)).max() <= 1  # identity maths, one call per face


def _device_engines(model: Path, enhancer_model: Path) -> list[InswapperEngine]:
    """Engines on a CPU session (host round trip) and, when this onnxruntime has CUDA, an IO-bound one."""
    providers = [["CPUExecutionProvider"]]
    if "CUDAExecutionProvider" in ort.get_available_providers():
        providers.append(["CUDAExecutionProvider", "CPUExecutionProvider"])
    engines = []
    for chain in providers:
        swapper = Swapper(
            ort.InferenceSession(str(model), providers=chain), get_spec("inswapper_128"), extract_emap(model)
        )
        enhancer = Enhancer(
            ort.InferenceSession(str(enhancer_model), providers=chain), get_spec("gfpgan_1.4")
        )
        engines.append(InswapperEngine(FakeDetector(FACES), FakeEmbedder(), swapper, enhancer))  # type: ignore[arg-type]
    return engines


@pytest.mark.gpu
def test_device_frames_give_the_host_result(latent_model: Path, tmp_path: Path) -> None:
    available, reason = cupy_available()
    if not available:
        pytest.skip(reason)
    import cupy

    model = convert_to_dynamic_batch(latent_model, tmp_path)
    gfpgan = convert_to_dynamic_batch(synthetic_models.build_gfpgan(tmp_path / "gfpgan.onnx"), tmp_path)
    mouth_face, _ = with_open_mouth(FACES[0])
    faces = [mouth_face, FACES[1]]
    frames = [smooth_frame(0.0), smooth_frame(0.9)]
    for engine in _device_engines(model, gfpgan):
        source = engine.prepare_source(frames[0])
        options = SwapOptions(mouth_mask=True, enhance=True)
        host = engine.swap_batch([SwapItem(frame, faces, source, options) for frame in frames])
        device_frames = [cupy.asarray(frame) for frame in frames]
        device = engine.swap_batch([SwapItem(frame, faces, source, options) for frame in device_frames])
        for frame, device_frame, host_output, device_output in zip(frames, device_frames, host, device):
            assert isinstance(device_output, cupy.ndarray)
            assert np.array_equal(cupy.asnumpy(device_frame), frame)  # inputs untouched on the device too
            # crops are bit-identical on both devices; each GPU paste is within 1 level of the CPU one
            assert np.abs(cupy.asnumpy(device_output).astype(int) - host_output.astype(int)).max() <= 2
