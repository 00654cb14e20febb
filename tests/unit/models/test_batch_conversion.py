"""models/batch_conversion.py: batch-1 exports become batchable, emap stays last, converted once."""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

from models.batch_conversion import (
    BATCH_DIM_NAME,
    check_batch_equivalence,
    convert_to_dynamic_batch,
    converted_path,
    file_sha256,
    make_batch_dynamic,
)
from models.errors import ModelContractError
from tests import synthetic_models


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.fixture
def latent_swapper(tmp_path: Path) -> Path:
    return synthetic_models.build_inswapper(tmp_path / "inswapper_128.onnx", kind="latent_dependent")


def test_lookalike_really_has_fixed_batch_and_baked_reshape(latent_swapper: Path) -> None:
    session = _session(latent_swapper)
    assert session.get_inputs()[0].shape == [1, 3, 128, 128]
    target = np.zeros((2, 3, 128, 128), np.float32)
    with pytest.raises(InvalidArgument):  # the original refuses batch 2: conversion is needed
        session.run(None, {"target": target, "source": np.ones((2, 512), np.float32)})


def test_converted_swapper_batch_of_4_equals_4_single_runs(latent_swapper: Path, tmp_path: Path) -> None:
    converted = convert_to_dynamic_batch(latent_swapper, tmp_path / "cache")
    original, batched = _session(latent_swapper), _session(converted)
    assert batched.get_inputs()[0].shape[0] == BATCH_DIM_NAME
    assert batched.get_outputs()[0].shape[0] == BATCH_DIM_NAME
    rng = np.random.default_rng(3)
    target = rng.random((4, 3, 128, 128), dtype=np.float32)
    source = rng.standard_normal((4, 512)).astype(np.float32)
    (together,) = batched.run(["output"], {"target": target, "source": source})
    singles = [
        original.run(["output"], {"target": target[i : i + 1], "source": source[i : i + 1]})[0]
        for i in range(4)
    ]
    np.testing.assert_allclose(together, np.concatenate(singles), rtol=0, atol=1e-6)
    # the four faces got different latents, so the outputs differ: the batch was not collapsed to one row
    assert not np.allclose(together[0], together[1])


def test_reshape_constant_rewritten_and_emap_still_last(latent_swapper: Path) -> None:
    model = onnx.load(str(latent_swapper))
    emap_before = numpy_helper.to_array(model.graph.initializer[-1])
    count_before = len(model.graph.initializer)
    report = make_batch_dynamic(model)
    assert report.inputs_changed == ("target", "source")
    assert report.outputs_changed == ("output",)
    assert len(report.reshapes_rewritten) == 1
    assert report.last_initializer == "emap"
    assert len(model.graph.initializer) == count_before
    np.testing.assert_array_equal(numpy_helper.to_array(model.graph.initializer[-1]), emap_before)
    reshape = next(node for node in model.graph.node if node.op_type == "Reshape")
    constant = next(node for node in model.graph.node if node.output and node.output[0] == reshape.input[1])
    assert numpy_helper.to_array(constant.attribute[0].t).tolist() == [0, 3, 1, 1]


def test_identity_and_fp16_lookalikes_convert_and_run_batched(tmp_path: Path) -> None:
    for name, fp16 in (("identity.onnx", False), ("fp16.onnx", True)):
        source_path = synthetic_models.build_inswapper(tmp_path / name, fp16_weights=fp16)
        converted = _session(convert_to_dynamic_batch(source_path, tmp_path / "cache"))
        target = np.random.default_rng(0).random((3, 3, 128, 128), dtype=np.float32)
        (output,) = converted.run(["output"], {"target": target, "source": np.ones((3, 512), np.float32)})
        np.testing.assert_allclose(output, target, atol=1e-3 if fp16 else 0)


def test_gfpgan_lookalike_converts(tmp_path: Path) -> None:
    converted = _session(
        convert_to_dynamic_batch(synthetic_models.build_gfpgan(tmp_path / "g.onnx"), tmp_path)
    )
    batch = np.random.default_rng(1).uniform(-1, 1, (2, 3, 512, 512)).astype(np.float32)
    (output,) = converted.run(["output"], {"input": batch})
    np.testing.assert_array_equal(output, batch)


def test_conversion_is_cached_by_source_hash(latent_swapper: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = convert_to_dynamic_batch(latent_swapper, cache)
    assert first == converted_path(latent_swapper, cache, file_sha256(latent_swapper))
    stamp = first.stat().st_mtime_ns
    assert convert_to_dynamic_batch(latent_swapper, cache) == first
    assert first.stat().st_mtime_ns == stamp  # reused, not rewritten
    assert [p.name for p in cache.iterdir()] == [first.name]  # no temporary files left behind
    # a different file under the same name gets its own entry
    synthetic_models.build_inswapper(latent_swapper, kind="identity")
    second = convert_to_dynamic_batch(latent_swapper, cache)
    assert second != first and second.is_file()


def test_trusted_hash_skips_hashing_but_keys_the_cache(latent_swapper: Path, tmp_path: Path) -> None:
    converted = convert_to_dynamic_batch(latent_swapper, tmp_path, source_sha256="ab" * 32)
    assert converted == converted_path(latent_swapper, tmp_path, "ab" * 32)


def test_missing_or_garbage_file_is_a_contract_error(tmp_path: Path) -> None:
    with pytest.raises(ModelContractError, match="no such file"):
        convert_to_dynamic_batch(tmp_path / "absent.onnx", tmp_path)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00not a model" * 10)
    with pytest.raises(ModelContractError, match="not a readable ONNX"):
        convert_to_dynamic_batch(garbage, tmp_path / "cache")


def test_graph_that_folds_the_batch_is_refused_and_not_cached(tmp_path: Path) -> None:
    folding = synthetic_models.build_inswapper(tmp_path / "folding.onnx", kind="batch_folding")
    target = np.random.default_rng(0).random((1, 3, 128, 128), dtype=np.float32)
    (output,) = _session(folding).run(["output"], {"target": target, "source": np.ones((1, 512), np.float32)})
    np.testing.assert_array_equal(output, target)  # a fine batch-1 model ...
    cache = tmp_path / "cache"
    with pytest.raises(ModelContractError, match="batch"):  # ... that a naive conversion would break
        convert_to_dynamic_batch(folding, cache)
    (marker,) = cache.iterdir()  # no model copy, only the verdict
    assert marker.name.endswith(".refused")
    with pytest.raises(ModelContractError, match="verdict cached"):
        convert_to_dynamic_batch(folding, cache)


def test_batch_equivalence_check_passes_the_good_lookalikes(latent_swapper: Path, tmp_path: Path) -> None:
    converted = convert_to_dynamic_batch(latent_swapper, tmp_path)
    check_batch_equivalence(converted)  # raises on failure
    arcface = synthetic_models.build_arcface(tmp_path / "arcface.onnx")  # symbolic already: nothing to do
    check_batch_equivalence(arcface)
