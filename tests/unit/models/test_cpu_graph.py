"""The CPU provider's PRelu rewrite: the same outputs bit for bit, on a made-up graph and on the bundled
MediaPipe models the default engine runs every frame."""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from models.cpu_graph import MAX_REWRITE_BYTES, cpu_session_source, split_prelu
from models.model_files import BUNDLED_MODELS_DIR

BUNDLED_WITH_PRELU = ("lmk_mediapipe_facemesh_468.onnx", "hand_mediapipe_palm_lite_192.onnx")


def _session(source: str | bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])


def _conv_prelu_model(opset: int = 17) -> onnx.ModelProto:
    """Conv -> PRelu with per-channel slopes of every kind: negative, zero, between 0 and 1, above 1."""
    rng = np.random.default_rng(3)
    weights = numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w")
    slope = numpy_helper.from_array(np.array([-1.5, 0.0, 0.25, 1.4], np.float32).reshape(1, 4, 1, 1), "s")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("PRelu", ["c", "s"], ["y"], name="act"),
        ],
        "conv_prelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
        initializer=[weights, slope],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def test_a_prelu_becomes_relu_min_mul_add_with_the_same_outputs() -> None:
    model = _conv_prelu_model()
    plain = _session(model.SerializeToString())
    assert split_prelu(model) == 1
    ops = [node.op_type for node in model.graph.node]
    assert "PRelu" not in ops and ops.count("Relu") == ops.count("Min") == 1
    onnx.checker.check_model(model)
    x = np.random.default_rng(0).normal(size=(1, 3, 16, 16)).astype(np.float32)
    (expected,), (actual,) = (
        plain.run(None, {"x": x}),
        _session(model.SerializeToString()).run(None, {"x": x}),
    )
    assert (expected < 0).any() and (expected > 0).any()
    np.testing.assert_array_equal(actual, expected)


def test_an_old_opset_and_a_computed_slope_are_left_alone() -> None:
    assert split_prelu(_conv_prelu_model(opset=7)) == 0
    model = _conv_prelu_model()
    model.graph.node[1].input[1] = "c"  # a slope that is not an initializer
    assert split_prelu(model) == 0


@pytest.mark.parametrize("file_name", BUNDLED_WITH_PRELU)
def test_the_bundled_mediapipe_models_give_the_same_outputs(file_name: str) -> None:
    path = BUNDLED_MODELS_DIR / file_name
    source, count = cpu_session_source(path)
    assert isinstance(source, bytes) and count > 20
    plain, rewritten = _session(str(path)), _session(source)
    x = np.random.default_rng(1).random((1, 192, 192, 3), np.float32)
    for expected, actual in zip(
        plain.run(None, {"input_1": x}), rewritten.run(None, {"input_1": x}), strict=True
    ):
        np.testing.assert_array_equal(actual, expected)


def test_files_without_prelu_unreadable_or_large_are_passed_as_paths(tmp_path: Path) -> None:
    yunet = BUNDLED_MODELS_DIR / "det_yunet_n_dynamic.onnx"
    assert cpu_session_source(yunet) == (str(yunet), 0)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    assert cpu_session_source(garbage) == (str(garbage), 0)
    large = tmp_path / "large.onnx"
    large.write_bytes(_conv_prelu_model().SerializeToString() + b"\0" * (MAX_REWRITE_BYTES + 1))
    assert cpu_session_source(large) == (str(large), 0)
