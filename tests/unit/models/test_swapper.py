"""models/swapper.py: emap extraction, latent maths, batching and pre/post-processing of inswapper_128."""

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from numpy.typing import NDArray

from models.batch_conversion import convert_to_dynamic_batch
from models.errors import ModelContractError
from models.registry import INSWAPPER_128_TEMPLATE, get_spec
from models.swapper import (
    Swapper,
    extract_emap,
    face_alignments,
    feathered_box_mask,
    postprocess_swapped,
    source_latent,
)
from tests import synthetic_models

SPEC = get_spec("inswapper_128")


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _insightface_latent(embedding: NDArray[np.float32], emap: NDArray[np.float32]) -> NDArray[np.float32]:
    """insightface INSwapper.get, line for line (normed_embedding, then latent @ emap, then /= norm)."""
    normed_embedding = embedding / np.linalg.norm(embedding)
    latent = normed_embedding.reshape((1, -1))
    latent = np.dot(latent, emap)
    latent /= np.linalg.norm(latent)
    return latent


def _expected_latent_dependent(
    target: NDArray[np.float32], latents: NDArray[np.float32]
) -> NDArray[np.float32]:
    weights = synthetic_models.latent_dependent_weights()
    shift = synthetic_models.LATENT_SHIFT_SCALE * np.tanh(latents @ weights)
    return np.clip(target + shift[:, :, None, None], 0.0, 1.0)


@pytest.fixture
def latent_model(tmp_path: Path) -> Path:
    return synthetic_models.build_inswapper(tmp_path / "inswapper_128.onnx", kind="latent_dependent")


def test_emap_is_the_last_initializer(latent_model: Path) -> None:
    emap = extract_emap(latent_model)
    assert emap.dtype == np.float32 and emap.shape == (512, 512)
    np.testing.assert_array_equal(emap, synthetic_models.emap_matrix())


def test_emap_survives_batch_conversion(latent_model: Path, tmp_path: Path) -> None:
    converted = convert_to_dynamic_batch(latent_model, tmp_path / "cache")
    np.testing.assert_array_equal(extract_emap(converted), extract_emap(latent_model))


def test_fp16_emap_is_returned_as_float32(tmp_path: Path) -> None:
    path = synthetic_models.build_inswapper(tmp_path / "fp16.onnx", fp16_weights=True)
    emap = extract_emap(path)
    assert emap.dtype == np.float32
    np.testing.assert_allclose(emap, synthetic_models.emap_matrix(), atol=1e-3)


def test_file_without_emap_is_refused(tmp_path: Path) -> None:
    arcface = synthetic_models.build_arcface(tmp_path / "arcface.onnx")  # last initializer is [147, 512]
    with pytest.raises(ModelContractError, match="emap"):
        extract_emap(arcface)


def test_latent_matches_insightface_reference() -> None:
    rng = np.random.default_rng(7)
    emap = synthetic_models.emap_matrix()
    embedding = (rng.standard_normal(512) * 20.0).astype(np.float32)  # raw arcface norms are ~20
    latent = source_latent(embedding, emap)
    assert latent.shape == (512,)
    np.testing.assert_allclose(latent, _insightface_latent(embedding, emap)[0], rtol=0, atol=1e-6)
    assert np.linalg.norm(latent) == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(source_latent(embedding * 0.01, emap), latent, atol=1e-6)  # norm-free
    rows = rng.standard_normal((3, 512)).astype(np.float32)
    batched = source_latent(rows, emap)
    for row, latent_row in zip(rows, batched):
        np.testing.assert_allclose(latent_row, _insightface_latent(row, emap)[0], atol=1e-6)


def test_latent_rejects_wrong_width_and_zero_embedding() -> None:
    emap = synthetic_models.emap_matrix()
    with pytest.raises(ModelContractError, match="128 dims"):
        source_latent(np.ones(128, np.float32), emap)
    with pytest.raises(ModelContractError, match="all-zero"):
        source_latent(np.zeros(512, np.float32), emap)


def test_swapper_output_follows_the_latent(latent_model: Path) -> None:
    swapper = Swapper(_session(latent_model), SPEC, extract_emap(latent_model))
    assert not swapper.supports_batch
    rng = np.random.default_rng(1)
    target = rng.random((3, 3, 128, 128), dtype=np.float32)
    latents = swapper.source_latent(rng.standard_normal((3, 512)).astype(np.float32))
    output = swapper.swap_crops(target, latents)
    np.testing.assert_allclose(output, _expected_latent_dependent(target, latents), atol=1e-5)


def test_batched_session_runs_once_per_bucket_and_equals_single_runs(
    latent_model: Path, tmp_path: Path
) -> None:
    emap = extract_emap(latent_model)
    single = Swapper(_session(latent_model), SPEC, emap)
    batched = Swapper(_session(convert_to_dynamic_batch(latent_model, tmp_path)), SPEC, emap)
    assert batched.supports_batch
    calls: list[int] = []
    forward = batched.forward

    def recording_forward(target: NDArray[np.float32], source: NDArray[np.float32]) -> NDArray[np.float32]:
        calls.append(len(target))
        return forward(target, source)

    batched.forward = recording_forward  # type: ignore[method-assign]
    rng = np.random.default_rng(2)
    target = rng.random((3, 3, 128, 128), dtype=np.float32)
    latents = batched.source_latent(rng.standard_normal((3, 512)).astype(np.float32))
    together = batched.swap_crops(target, latents)
    assert calls == [4]  # 3 faces padded to the bucket of 4, one session call
    np.testing.assert_allclose(together, single.swap_crops(target, latents), atol=1e-6)
    calls.clear()
    many = rng.random((21, 3, 128, 128), dtype=np.float32)
    many_latents = np.repeat(latents[:1], 21, axis=0)
    assert batched.swap_crops(many, many_latents).shape == (21, 3, 128, 128)
    assert calls == [16, 8]


def test_swap_crops_checks_counts_and_handles_no_faces(latent_model: Path) -> None:
    swapper = Swapper(_session(latent_model), SPEC, extract_emap(latent_model))
    empty = swapper.swap_crops(np.zeros((0, 3, 128, 128), np.float32), np.zeros((0, 512), np.float32))
    assert empty.shape == (0, 3, 128, 128)
    with pytest.raises(ModelContractError, match="2 crops but 1 latents"):
        swapper.swap_crops(np.zeros((2, 3, 128, 128), np.float32), np.zeros((1, 512), np.float32))


def test_fp16_variant_row_with_fp16_weight_lookalike(tmp_path: Path) -> None:
    path = synthetic_models.build_inswapper(
        tmp_path / "fp16.onnx", kind="latent_dependent", fp16_weights=True
    )
    swapper = Swapper(_session(path), get_spec("inswapper_128_fp16"), extract_emap(path))
    rng = np.random.default_rng(4)
    target = rng.random((2, 3, 128, 128), dtype=np.float32)
    latents = swapper.source_latent(rng.standard_normal((2, 512)).astype(np.float32))
    output = swapper.swap_crops(target, latents)
    assert output.dtype == np.float32
    np.testing.assert_allclose(output, _expected_latent_dependent(target, latents), atol=3e-3)


def test_wrong_model_is_a_contract_error(tmp_path: Path) -> None:
    arcface = synthetic_models.build_arcface(tmp_path / "arcface.onnx")
    with pytest.raises(ModelContractError, match="target"):
        Swapper(_session(arcface), SPEC, synthetic_models.emap_matrix())


def test_postprocess_swapped_scales_clips_and_goes_nhwc() -> None:
    output = np.zeros((1, 3, 2, 2), np.float32)
    output[0, 0] = [[0.0, 1.0], [-0.2, 1.5]]
    output[0, 1] = 0.5
    output[0, 2] = 100.0 / 255.0
    crops = postprocess_swapped(output)
    assert crops.shape == (1, 2, 2, 3) and crops.dtype == np.uint8 and crops.flags.c_contiguous
    assert crops[0, :, :, 0].tolist() == [[0, 255], [0, 255]]
    assert set(crops[0, :, :, 1].ravel().tolist()) == {128}
    assert set(crops[0, :, :, 2].ravel().tolist()) == {100}


def test_face_alignments_map_landmarks_onto_the_template() -> None:
    template = np.asarray(INSWAPPER_128_TEMPLATE, np.float32)
    angle, scale, offset = np.deg2rad(12.0), 1.7, np.array([210.0, 95.0])
    rotation = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    faces = np.stack([template @ rotation.T + offset, template * 0.8 + 40.0]).astype(np.float32)
    matrices = face_alignments(faces, SPEC)
    assert matrices.shape == (2, 2, 3) and matrices.dtype == np.float32
    for points, matrix in zip(faces, matrices):
        mapped = points @ matrix[:, :2].T + matrix[:, 2]
        np.testing.assert_allclose(mapped, template, atol=1e-3)


def test_feathered_box_mask_is_zero_at_the_border_and_one_inside() -> None:
    mask = feathered_box_mask((128, 128))
    assert mask.shape == (128, 128) and mask.dtype == np.float32
    assert mask.min() == 0.0 and mask.max() == 1.0
    assert np.all(mask[0] == 0) and np.all(mask[:, -1] == 0)
    assert mask[64, 64] == 1.0
    np.testing.assert_allclose(mask, mask[::-1, ::-1], atol=1e-6)
    row = mask[64, :64]
    assert np.all(np.diff(row) >= -1e-6)  # rises monotonically from the edge to the centre
    wide = feathered_box_mask((256, 128))
    assert wide.shape == (128, 256)
