"""An inswapper-sized swap network built at run time, so the GPU bench measures a realistic model load
without the 554 MB download (and without committing weights).

Same IO contract as inswapper_128: `target` float32 [N,3,128,128] RGB [0,1] + `source` float32 [N,512]
-> `output` [N,3,128,128] in [0,1], batch symbolic. Architecture (about 138 M parameters at width 1.0,
like the 554,253,681-byte file's 138.5 M float32 weights):

    encoder  7x7 conv 3->128 @128 | 3x3/2 conv 128->256 @64 | 256->512 @32 | 512->1024 @16   (ReLU)
    6 style blocks @16x16, 1024 ch: conv3x3 -> AdaIN(latent) -> ReLU -> conv3x3 -> AdaIN(latent), + skip;
        AdaIN = InstanceNorm, then * (1 + latent @ W_scale) + latent @ W_shift (W: 512 x 1024 each)
    decoder  nearest x2 + 3x3 conv 1024->512 @32 | 512->256 @64 | 256->128 @128 | 7x7 conv 128->3, sigmoid

`width` scales every channel count (the CPU `--quick` run uses 1/16). `count_flops` reads the FLOPs per
face off the graph (2 x multiply-adds of Conv and MatMul), so docs/gpu.md and the bench agree.
"""

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

INPUT_SIZE = 128
LATENT_SIZE = 512
STYLE_BLOCKS = 6
OPSET = 17
BASE_CHANNELS = (128, 256, 512, 1024)


@dataclass(frozen=True)
class SyntheticSwapper:
    """The serialized model and its size figures."""

    model_bytes: bytes
    parameters: int
    gflops_per_face: float
    width: float


class _GraphBuilder:
    """Accumulates nodes and random initializers with unique names (He-scaled so activations stay sane)."""

    def __init__(self, seed: int) -> None:
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.rng = np.random.default_rng(seed)
        self.parameters = 0
        self.flops = 0  # per face
        self._count = 0

    def name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def weight(self, shape: tuple[int, ...], fan_in: int, gain: float = 1.0) -> str:
        from onnx import numpy_helper

        name = self.name("w")
        values = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(gain * np.sqrt(2.0 / fan_in))
        self.initializers.append(numpy_helper.from_array(values, name))
        self.parameters += int(np.prod(shape))
        return name

    def constant(self, values: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.name("c")
        self.initializers.append(numpy_helper.from_array(values, name))
        return name

    def node(self, op: str, inputs: list[str], **attributes: Any) -> str:
        from onnx import helper

        output = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    def conv(self, x: str, c_in: int, c_out: int, kernel: int, size_out: int, stride: int = 1) -> str:
        weight = self.weight((c_out, c_in, kernel, kernel), c_in * kernel * kernel)
        bias = self.constant(np.zeros(c_out, np.float32))
        self.parameters += c_out
        self.flops += 2 * c_out * c_in * kernel * kernel * size_out * size_out
        pad = kernel // 2
        return self.node("Conv", [x, weight, bias], pads=[pad] * 4, strides=[stride, stride])

    def adain(self, x: str, latent: str, channels: int) -> str:
        ones = self.constant(np.ones(channels, np.float32))
        zeros = self.constant(np.zeros(channels, np.float32))
        normalised = self.node("InstanceNormalization", [x, ones, zeros])
        shape = self.constant(np.array([-1, channels, 1, 1], np.int64))
        styles = []
        for gain in (0.1, 0.1):  # scale and shift stay small: the block is near identity at random init
            projected = self.node("MatMul", [latent, self.weight((LATENT_SIZE, channels), LATENT_SIZE, gain)])
            self.flops += 2 * LATENT_SIZE * channels
            styles.append(self.node("Reshape", [projected, shape]))
        one = self.constant(np.ones((1,), np.float32))
        scaled = self.node("Mul", [normalised, self.node("Add", [styles[0], one])])
        return self.node("Add", [scaled, styles[1]])


def _channels(width: float) -> tuple[int, int, int, int]:
    return tuple(max(4, round(channels * width)) for channels in BASE_CHANNELS)  # type: ignore[return-value]


def build_synthetic_swapper(width: float = 1.0, *, seed: int = 0) -> SyntheticSwapper:
    """Build the network described in the module docstring (onnx imported here: a dev/bench dependency)."""
    import onnx
    from onnx import TensorProto, helper

    c1, c2, c3, c4 = _channels(width)
    graph = _GraphBuilder(seed)
    x = graph.node("Relu", [graph.conv("target", 3, c1, 7, 128)])
    x = graph.node("Relu", [graph.conv(x, c1, c2, 3, 64, stride=2)])
    x = graph.node("Relu", [graph.conv(x, c2, c3, 3, 32, stride=2)])
    x = graph.node("Relu", [graph.conv(x, c3, c4, 3, 16, stride=2)])
    for _ in range(STYLE_BLOCKS):
        h = graph.node("Relu", [graph.adain(graph.conv(x, c4, c4, 3, 16), "source", c4)])
        h = graph.adain(graph.conv(h, c4, c4, 3, 16), "source", c4)
        x = graph.node("Add", [x, h])
    scales = graph.constant(np.array([1, 1, 2, 2], np.float32))
    for c_in, c_out, size in ((c4, c3, 32), (c3, c2, 64), (c2, c1, 128)):
        upsampled = graph.node("Resize", [x, "", scales], mode="nearest")
        x = graph.node("Relu", [graph.conv(upsampled, c_in, c_out, 3, size)])
    x = graph.conv(x, c1, 3, 7, 128)
    graph.nodes.append(helper.make_node("Sigmoid", [x], ["output"]))
    onnx_graph = helper.make_graph(
        graph.nodes,
        "synthetic_inswapper",
        [
            helper.make_tensor_value_info("target", TensorProto.FLOAT, ["N", 3, INPUT_SIZE, INPUT_SIZE]),
            helper.make_tensor_value_info("source", TensorProto.FLOAT, ["N", LATENT_SIZE]),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3, INPUT_SIZE, INPUT_SIZE])],
        graph.initializers,
    )
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    model_bytes = model.SerializeToString()
    if len(model_bytes) < 2**31 - 1:
        onnx.checker.check_model(model_bytes)
    swapper = SyntheticSwapper(model_bytes, graph.parameters, graph.flops / 1e9, width)
    logger.info(
        "synthetic swapper: width %.3g, %.1f M parameters, %.1f GFLOPs per face, %.0f MB",
        width,
        swapper.parameters / 1e6,
        swapper.gflops_per_face,
        len(model_bytes) / 1e6,
    )
    return swapper
