"""Backend choice: both halves of the GPU path or none; explicit GPU requests fail loudly (fake probes)."""

import logging

import pytest

from models.errors import GpuUnavailableError
from models.inference import available_providers
from streamer.pipeline.compute_backend import (
    BackendProbes,
    ComputeBackend,
    ProbeResult,
    choose_backend,
    probe_cuda_provider,
)


class FakeStream:
    ptr = 0x7F00


def probes(cupy_ok: bool, provider_ok: bool) -> BackendProbes:
    return BackendProbes(
        cupy=lambda: ProbeResult(
            cupy_ok, "cupy fine" if cupy_ok else "CuPy unusable: no CUDA device visible"
        ),
        cuda_provider=lambda device: ProbeResult(
            provider_ok, f"cuda ep on {device}" if provider_ok else "onnxruntime has no CUDAExecutionProvider"
        ),
    )


def test_auto_takes_the_gpu_path_when_both_halves_work() -> None:
    backend = choose_backend(
        "auto", device_id=1, probes=probes(True, True), stream_factory=lambda _: FakeStream()
    )
    assert backend.on_gpu and backend.array_backend == "cupy" and backend.execution_provider == "cuda"
    assert backend.reason == "cupy fine; cuda ep on 1"
    config = backend.inference_config(cuda_graphs=True)
    assert config.execution_provider == "cuda"
    assert config.device_id == 1
    assert config.user_compute_stream == FakeStream.ptr  # ORT shares the engine's stream
    assert config.cuda_graphs


@pytest.mark.parametrize(
    ("cupy_ok", "provider_ok", "why"), [(False, True, "CuPy"), (True, False, "CUDAExec")]
)
def test_auto_falls_back_to_cpu_with_the_reason(
    cupy_ok: bool, provider_ok: bool, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="streamer.pipeline.compute_backend"):
        backend = choose_backend("auto", probes=probes(cupy_ok, provider_ok))
    assert not backend.on_gpu
    assert backend.execution_provider == "cpu"
    assert why in backend.reason
    assert why in caplog.text
    config = backend.inference_config(cuda_graphs=True)
    assert config.user_compute_stream is None and not config.cuda_graphs


@pytest.mark.parametrize("requested", ["cuda", "tensorrt"])
@pytest.mark.parametrize(("cupy_ok", "provider_ok"), [(False, True), (True, False), (False, False)])
def test_explicit_gpu_request_without_cuda_is_an_error_naming_the_fix(
    requested: str, cupy_ok: bool, provider_ok: bool
) -> None:
    with pytest.raises(GpuUnavailableError, match="requirements-gpu.txt.*--execution-provider cpu"):
        choose_backend(requested, probes=probes(cupy_ok, provider_ok))  # type: ignore[arg-type]


def test_tensorrt_request_keeps_its_provider() -> None:
    backend = choose_backend("tensorrt", probes=probes(True, True), stream_factory=lambda _: FakeStream())
    assert backend.execution_provider == "tensorrt"


def test_cpu_request_never_probes() -> None:
    def fail() -> ProbeResult:
        raise AssertionError("probed")

    backend = choose_backend("cpu", probes=BackendProbes(cupy=fail, cuda_provider=lambda _: fail()))
    assert backend == ComputeBackend("numpy", "cpu", backend.reason)
    assert "requested" in backend.reason
    assert "--" not in backend.reason  # the log must not claim a flag: a library caller gave none


@pytest.mark.skipif("CUDAExecutionProvider" in available_providers(), reason="this onnxruntime has CUDA")
def test_real_provider_probe_reports_a_cpu_only_build() -> None:
    result = probe_cuda_provider(0)
    assert not result.ok
    assert "CUDAExecutionProvider" in result.reason


def test_real_auto_choice_on_this_machine_is_consistent() -> None:
    backend = choose_backend("auto")
    assert backend.on_gpu == (backend.stream is not None)
    assert backend.on_gpu == (backend.execution_provider == "cuda")
