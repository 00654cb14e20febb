"""Provider chains: what each --execution-provider asks ONNX Runtime for, caches included; thread plans."""

from pathlib import Path

from onnx import TensorProto, helper

from models.inference import InferenceConfig, create_session, plan_threads, provider_chain
from models.registry import ModelSpec, TensorSpec


def test_tensorrt_keeps_engines_and_timings_in_its_cache_dir(tmp_path: Path) -> None:
    cache = tmp_path / "tensorrt"
    chain = provider_chain(
        InferenceConfig(
            execution_provider="tensorrt", tensorrt_cache_dir=str(cache), user_compute_stream=1234
        )
    )
    assert [name for name, _ in chain] == [
        "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"
    ]  # fmt: skip
    trt = chain[0][1]
    assert trt["trt_engine_cache_enable"] and trt["trt_timing_cache_enable"]
    assert trt["trt_engine_cache_path"] == trt["trt_timing_cache_path"] == str(cache)
    assert cache.is_dir()  # made before ORT writes the first engine
    for _, options in chain[:2]:  # TensorRT and its CUDA fallback both run on the kernels' stream
        assert options["user_compute_stream"] == "1234" and options["has_user_compute_stream"] == "1"


def test_cpu_asks_for_the_cpu_provider_only() -> None:
    assert provider_chain(InferenceConfig()) == [("CPUExecutionProvider", {})]


def test_few_cores_get_one_thread_and_no_spinning() -> None:
    """On a 2-core machine extra intra-op threads (spinning, by ORT's default) starve the codecs."""
    plan = plan_threads(InferenceConfig(), cores=2)
    assert (plan.intra_op_threads, plan.allow_spinning) == (1, False)
    assert "2 cores" in plan.reason


def test_many_cores_get_a_quarter_capped_at_four() -> None:
    assert plan_threads(InferenceConfig(), cores=8).intra_op_threads == 2
    assert plan_threads(InferenceConfig(), cores=64).intra_op_threads == 4


def test_an_explicit_count_and_the_gpu_override_the_core_rule() -> None:
    assert plan_threads(InferenceConfig(intra_op_threads=3), cores=2).intra_op_threads == 3
    assert plan_threads(InferenceConfig(execution_provider="cuda"), cores=64).intra_op_threads == 1
    assert plan_threads(InferenceConfig(allow_spinning=True), cores=2).allow_spinning


def test_sessions_are_built_with_the_plan(tmp_path: Path) -> None:
    path = tmp_path / "add.onnx"
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        "add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    spec = ModelSpec(
        name="add",
        role="detector",
        file_name="add.onnx",
        sha256="0" * 64,
        size_bytes=1,
        licence="test",
        description="x + x",
        inputs=(TensorSpec("x", (2,)),),
        outputs=(TensorSpec("y", (2,)),),
    )
    session = create_session(path, spec, InferenceConfig())
    options = session.get_session_options()
    expected = plan_threads(InferenceConfig())
    assert options.intra_op_num_threads == expected.intra_op_threads
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
