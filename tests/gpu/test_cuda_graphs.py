"""CUDA graphs per batch bucket: one captured graph per bucket (`gpu_graph_id`), each replayed with new
data written in place into its bound buffers, must give the CPU EP's results."""

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from bench.synthetic_swapper import build_synthetic_swapper
from gpu_ops.backend import require_cupy
from models.inference import InferenceConfig, create_session
from models.registry import get_spec

pytestmark = pytest.mark.gpu

BUCKETS = (1, 2, 4)


def test_one_graph_per_bucket_replays_new_inputs(tmp_path: Path) -> None:
    cupy = require_cupy()
    path = tmp_path / "swapper.onnx"
    path.write_bytes(build_synthetic_swapper(1.0 / 16).model_bytes)
    spec = get_spec("inswapper_128")
    graphs = create_session(path, spec, InferenceConfig(execution_provider="cuda", cuda_graphs=True))
    reference = create_session(path, spec, InferenceConfig())
    rng = np.random.default_rng(0)
    bound = {}
    for bucket in BUCKETS:
        target = cupy.zeros((bucket, 3, 128, 128), cupy.float32)
        source = cupy.zeros((bucket, 512), cupy.float32)
        output = cupy.zeros((bucket, 3, 128, 128), cupy.float32)
        binding = graphs.io_binding()
        for name, array in (("target", target), ("source", source)):
            binding.bind_input(name, "cuda", 0, np.float32, list(array.shape), array.data.ptr)
        binding.bind_output("output", "cuda", 0, np.float32, list(output.shape), output.data.ptr)
        options = ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", str(bucket))
        bound[bucket] = (target, source, output, binding, options)
    for round_index in range(3):  # round 0 warms up and captures; later rounds replay
        for bucket, (target, source, output, binding, options) in bound.items():
            host_target = rng.random((bucket, 3, 128, 128), dtype=np.float32)
            host_source = rng.standard_normal((bucket, 512)).astype(np.float32)
            target.set(host_target)  # same address, new data
            source.set(host_source)
            cupy.cuda.get_current_stream().synchronize()
            graphs.run_with_iobinding(binding, options)
            (expected,) = reference.run(None, {"target": host_target, "source": host_source})
            difference = float(np.abs(cupy.asnumpy(output) - expected).max())
            assert difference < 1e-2, f"bucket {bucket}, round {round_index}: max |diff| {difference}"
