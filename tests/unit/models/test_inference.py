"""Provider chains: what each --execution-provider asks ONNX Runtime for, caches included."""

from pathlib import Path

from models.inference import InferenceConfig, provider_chain


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
