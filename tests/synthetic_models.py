"""Small ONNX look-alikes of the neural models users download (inswapper_128, arcface w600k_r50, gfpgan 1.4).

The real files cannot be had on this machine. These graphs have the exact input/output names, shapes and
dtypes of the real ones, and the structural traits code relies on: inswapper's `emap` is the LAST graph
initializer (512x512) and its batch is fixed at 1, with a Reshape whose shape constant bakes that 1 in (as
the real exports do). Their maths is simple enough that a test can predict every output:

- identity swapper: output = target (the source only enters through a term multiplied by zero);
- latent-dependent swapper: output = clip(target + 0.25 * tanh(source @ W), 0, 1), W [512,3] one shift
  per colour channel, so the latent maths is observable in the output colour;
- batch-folding swapper: output = target, but computed through a Transpose that moves the batch to axis 1
  and a Reshape back; right at batch 1, wrong after a naive batch conversion (which must refuse it);
- arcface: 512-d embedding = (16x16-average-pooled chip, flattened) @ W, batch symbolic;
- gfpgan: output = input (identity in [-1, 1]), batch fixed at 1.
"""

from pathlib import Path
from typing import Literal

import numpy as np
import onnx
from numpy.typing import NDArray
from onnx import TensorProto, helper, numpy_helper

SwapperKind = Literal["identity", "latent_dependent", "batch_folding"]

OPSET = 17
LATENT_SHIFT_SCALE = 0.25


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


def latent_dependent_weights(seed: int = 0) -> NDArray[np.float32]:
    """The W [512,3] the latent-dependent swapper uses for a given seed (tests recompute outputs with it)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((512, 3)) * 2.0).astype(np.float32)


def emap_matrix(seed: int = 0) -> NDArray[np.float32]:
    """The 512x512 emap stored as the swapper look-alike's last initializer."""
    rng = np.random.default_rng(seed + 1000)
    return (rng.standard_normal((512, 512)) / np.sqrt(512.0)).astype(np.float32)


def build_inswapper(
    path: Path, *, kind: SwapperKind = "identity", fp16_weights: bool = False, seed: int = 0
) -> Path:
    """inswapper_128 look-alike: `target` [1,3,128,128] + `source` [1,512] -> `output` [1,3,128,128].

    With `fp16_weights` the graph computes in float16 behind float32 inputs/outputs (the
    inswapper_128_fp16 layout): weights are stored as float16 initializers, emap too.
    """
    weight_type = np.float16 if fp16_weights else np.float32
    onnx_weight_type = TensorProto.FLOAT16 if fp16_weights else TensorProto.FLOAT
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    target, source = "target", "source"
    if fp16_weights:
        nodes += [
            helper.make_node("Cast", ["target"], ["target_h"], to=TensorProto.FLOAT16),
            helper.make_node("Cast", ["source"], ["source_h"], to=TensorProto.FLOAT16),
        ]
        target, source = "target_h", "source_h"
    if kind == "identity":
        # source -> Reshape [1,512,1,1] (batch 1 baked in) -> ReduceMean -> * 0 -> + target
        initializers += [
            numpy_helper.from_array(np.array([1, 512, 1, 1], dtype=np.int64), "source_4d_shape"),
            numpy_helper.from_array(np.zeros((1,), dtype=weight_type), "zero"),
        ]
        nodes += [
            helper.make_node("Reshape", [source, "source_4d_shape"], ["source_4d"]),
            helper.make_node("ReduceMean", ["source_4d"], ["source_mean"], axes=[1], keepdims=1),
            helper.make_node("Mul", ["source_mean", "zero"], ["source_term"]),
            helper.make_node("Add", [target, "source_term"], ["result"]),
        ]
    elif kind == "batch_folding":
        initializers.append(
            numpy_helper.from_array(np.array([1, 3, 128, 128], dtype=np.int64), "unfold_shape")
        )
        nodes += [
            helper.make_node("Transpose", [target], ["folded"], perm=[1, 0, 2, 3]),
            helper.make_node("Reshape", ["folded", "unfold_shape"], ["result"]),
        ]
    else:
        initializers += [
            numpy_helper.from_array(latent_dependent_weights(seed).astype(weight_type), "style_weight"),
            numpy_helper.from_array(np.array([1, 3, 1, 1], dtype=np.int64), "style_shape"),
            numpy_helper.from_array(np.array([LATENT_SHIFT_SCALE], dtype=weight_type), "style_scale"),
            numpy_helper.from_array(np.array(0.0, dtype=weight_type), "low"),
            numpy_helper.from_array(np.array(1.0, dtype=weight_type), "high"),
        ]
        nodes += [
            helper.make_node("MatMul", [source, "style_weight"], ["style"]),
            helper.make_node("Tanh", ["style"], ["style_tanh"]),
            helper.make_node("Reshape", ["style_tanh", "style_shape"], ["style_4d"]),
            helper.make_node("Mul", ["style_4d", "style_scale"], ["shift"]),
            helper.make_node("Add", [target, "shift"], ["shifted"]),
            helper.make_node("Clip", ["shifted", "low", "high"], ["result"]),
        ]
    if fp16_weights:
        nodes.append(helper.make_node("Cast", ["result"], ["output"], to=TensorProto.FLOAT))
    else:
        nodes.append(helper.make_node("Identity", ["result"], ["output"]))
    # emap is not used by the graph (the real file keeps it for the caller): it must be the LAST initializer.
    initializers.append(numpy_helper.from_array(emap_matrix(seed).astype(weight_type), "emap"))
    assert initializers[-1].data_type == onnx_weight_type
    graph = helper.make_graph(
        nodes,
        "inswapper_128_lookalike",
        [
            helper.make_tensor_value_info("target", TensorProto.FLOAT, [1, 3, 128, 128]),
            helper.make_tensor_value_info("source", TensorProto.FLOAT, [1, 512]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, 128, 128])],
        initializers,
    )
    return _save(_model(graph), path)


def arcface_weights(seed: int = 0) -> NDArray[np.float32]:
    """W [147,512] of the arcface look-alike: 3 channels x 7 x 7 pooled cells -> 512."""
    rng = np.random.default_rng(seed + 2000)
    return rng.standard_normal((147, 512)).astype(np.float32)


def build_arcface(path: Path, *, seed: int = 0) -> Path:
    """arcface_w600k_r50 look-alike: `input.1` [N,3,112,112] -> `683` [N,512] (symbolic batch)."""
    nodes = [
        helper.make_node("AveragePool", ["input.1"], ["pooled"], kernel_shape=[16, 16], strides=[16, 16]),
        helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
        helper.make_node("MatMul", ["flat", "embedding_weight"], ["683"]),
    ]
    graph = helper.make_graph(
        nodes,
        "arcface_w600k_r50_lookalike",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["None", 3, 112, 112])],
        [helper.make_tensor_value_info("683", TensorProto.FLOAT, ["None", 512])],
        [numpy_helper.from_array(arcface_weights(seed), "embedding_weight")],
    )
    return _save(_model(graph), path)


def build_gfpgan(path: Path) -> Path:
    """gfpgan_1.4 look-alike: `input` [1,3,512,512] -> `output` = input, batch fixed at 1 with a baked Reshape."""
    nodes = [
        helper.make_node("Reshape", ["input", "image_shape"], ["reshaped"]),
        helper.make_node("Clip", ["reshaped", "low", "high"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gfpgan_1.4_lookalike",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 512, 512])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, 512, 512])],
        [
            numpy_helper.from_array(np.array([1, 3, 512, 512], dtype=np.int64), "image_shape"),
            numpy_helper.from_array(np.array(-1.0, dtype=np.float32), "low"),
            numpy_helper.from_array(np.array(1.0, dtype=np.float32), "high"),
        ],
    )
    return _save(_model(graph), path)
