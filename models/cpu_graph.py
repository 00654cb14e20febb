"""An exact rewrite of a model's graph for ONNX Runtime's CPU provider: PRelu as Relu + slope x Min(x, 0).

ORT's CPU PRelu is a generic broadcasting kernel that its NCHWc layout pass does not keep in the blocked
layout, so each one runs slowly and costs a reorder in and out. MediaPipe's models use one after almost
every convolution: PRelu took 63 % of the face mesh landmarker's time on this 2-core CPU. Relu, Min, Mul
and Add are kernels ORT runs in the blocked layout, and Relu(x) + slope * Min(x, 0) is PRelu exactly (the
same products and one exact addition of a zero), so the outputs are bit for bit the same: face mesh 3.7
-> 1.8 ms per face, palm detector 11.7 -> 8.9 ms (docs/benchmarks.md, issue 20).

Only files up to MAX_REWRITE_BYTES are parsed for it: the small per-frame models are what the CPU runs
every frame; a large model (a swapper or an embedder of hundreds of MB) would be parsed twice at start-up.
GPU providers get the file as it is.
"""

import logging
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper

logger = logging.getLogger(__name__)

MAX_REWRITE_BYTES = 64 << 20
MIN_OPSET = 8  # Min with broadcasting


def _default_opset(model: onnx.ModelProto) -> int:
    return next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), 0)


def split_prelu(model: onnx.ModelProto) -> int:
    """Rewrite every PRelu whose slope is an initializer as Relu + slope * Min(x, 0), in place; returns
    how many were rewritten (0 for an opset too old for a broadcasting Min)."""
    if _default_opset(model) < MIN_OPSET:
        return 0
    graph = model.graph
    slopes = {tensor.name: tensor for tensor in graph.initializer}
    zeros: dict[int, str] = {}  # element type -> the name of its scalar zero
    nodes: list[onnx.NodeProto] = []
    rewritten = 0
    for node in graph.node:
        if node.op_type != "PRelu" or node.domain not in ("", "ai.onnx") or node.input[1] not in slopes:
            nodes.append(node)
            continue
        x, slope = node.input
        element_type = slopes[slope].data_type
        if element_type not in zeros:
            zeros[element_type] = f"cpu_graph_zero_{element_type}"
            dtype = helper.tensor_dtype_to_np_dtype(element_type)
            graph.initializer.append(numpy_helper.from_array(np.zeros((1,), dtype), zeros[element_type]))
        y = node.output[0]
        stem = node.name or y
        nodes += [
            helper.make_node("Relu", [x], [f"{y}_positive"], name=f"{stem}_relu"),
            helper.make_node("Min", [x, zeros[element_type]], [f"{y}_negative"], name=f"{stem}_min"),
            helper.make_node("Mul", [f"{y}_negative", slope], [f"{y}_sloped"], name=f"{stem}_mul"),
            helper.make_node("Add", [f"{y}_positive", f"{y}_sloped"], [y], name=f"{stem}_add"),
        ]
        rewritten += 1
    if rewritten:
        del graph.node[:]
        graph.node.extend(nodes)
    return rewritten


def cpu_session_source(model_path: Path) -> tuple[str | bytes, int]:
    """What to hand ORT's CPU provider for `model_path`: the rewritten model's bytes and how many PRelu
    it split, or the path itself (and 0) when there is nothing to rewrite or the file is too large."""
    if model_path.stat().st_size > MAX_REWRITE_BYTES:
        return str(model_path), 0
    try:
        model = onnx.load(str(model_path))
    except (DecodeError, ValueError, OSError):  # not a readable model: ORT's error, raised next, says so
        return str(model_path), 0
    count = split_prelu(model)
    if count == 0:
        return str(model_path), 0
    return model.SerializeToString(), count
