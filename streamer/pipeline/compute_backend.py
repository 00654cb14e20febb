"""Run-time choice of where frames and models run: CuPy + CUDA EP when both work, else NumPy + CPU EP.

Either half alone is worse than the CPU path (frames bounce across the bus between CuPy kernels and a
CPU session, or between NumPy ops and a CUDA session), so the GPU path is taken only when CuPy sees a
device AND onnxruntime really places a session on CUDAExecutionProvider (ORT falls back to CPU silently,
so a tiny probe session is built and its active provider read back). With `auto` a failed probe falls
back to the CPU path and the reason is logged and exposed for /metrics; an explicit `cuda`/`tensorrt`
request that cannot be met raises GpuUnavailableError naming the fix instead.

On the GPU path the engine's CUDA stream is created here and its handle is handed to ORT as
`user_compute_stream`, so kernels and models are ordered on one stream without host syncs.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from gpu_ops.backend import cupy_available, require_cupy
from models.errors import GpuUnavailableError
from models.inference import ExecutionProvider, InferenceConfig, available_providers
from streamer.pipeline.choices import BACKEND_REQUESTS, BackendRequest

logger = logging.getLogger(__name__)

ArrayBackend = Literal["cupy", "numpy"]

GPU_FIX = (
    "install requirements-gpu.txt (onnxruntime-gpu and the cupy-cuda build matching the driver: "
    "1.27+ and cupy-cuda13x for CUDA 13), check `nvidia-smi`, or use --execution-provider cpu"
)


@dataclass(frozen=True)
class ProbeResult:
    """Whether one half of the GPU path works, and why (in words, for logs and /metrics)."""

    ok: bool
    reason: str


@dataclass(frozen=True)
class BackendProbes:
    """How the two halves are tested; tests pass fakes, production uses the defaults."""

    cupy: Callable[[], ProbeResult]
    cuda_provider: Callable[[int], ProbeResult]


@dataclass(frozen=True)
class ComputeBackend:
    """The chosen backend. `stream` is the engine's CuPy stream (None on CPU); its handle goes to ORT."""

    array_backend: ArrayBackend
    execution_provider: ExecutionProvider
    reason: str
    device_id: int = 0
    stream: Any = field(default=None, compare=False, repr=False)

    @property
    def on_gpu(self) -> bool:
        return self.array_backend == "cupy"

    @property
    def stream_handle(self) -> int | None:
        return None if self.stream is None else int(self.stream.ptr)

    def inference_config(
        self, *, cuda_graphs: bool = False, tensorrt_cache_dir: str | None = None, intra_op_threads: int = 0
    ) -> InferenceConfig:
        """Session settings on this backend: same provider, same device, same stream as the kernels."""
        return InferenceConfig(
            execution_provider=self.execution_provider,
            device_id=self.device_id,
            intra_op_threads=intra_op_threads,
            user_compute_stream=self.stream_handle,
            tensorrt_cache_dir=tensorrt_cache_dir,
            cuda_graphs=cuda_graphs and self.on_gpu,
        )

    def describe(self) -> dict[str, str]:
        """Key/value pairs for the log line and the /metrics info gauge."""
        return {
            "array_backend": self.array_backend,
            "execution_provider": self.execution_provider,
            "backend_reason": self.reason,
        }


def _probe_model() -> bytes:
    """A one-node graph (y = x + 1): enough for ORT to place it on a provider."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])],
        "provider_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def probe_cupy() -> ProbeResult:
    ok, reason = cupy_available()
    return ProbeResult(ok, reason)


def probe_cuda_provider(device_id: int) -> ProbeResult:
    """Build the probe session on CUDA EP and check that ORT kept it there and computes right."""
    if "CUDAExecutionProvider" not in available_providers():
        return ProbeResult(
            False, f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (CPU-only build)"
        )
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(
            _probe_model(),
            sess_options=options,
            providers=[("CUDAExecutionProvider", {"device_id": device_id}), "CPUExecutionProvider"],
        )
        active = session.get_providers()[0]
        if active != "CUDAExecutionProvider":
            return ProbeResult(
                False, f"onnxruntime fell back to {active} (CUDA/cuDNN libraries not loadable)"
            )
        (output,) = session.run(None, {"x": np.zeros(4, dtype=np.float32)})
        if not np.allclose(output, 1.0):
            return ProbeResult(False, "CUDAExecutionProvider computed a wrong probe result")
    except Exception as error:  # noqa: BLE001 - any load/run failure means "not usable", with its reason
        return ProbeResult(False, f"CUDAExecutionProvider failed: {type(error).__name__}: {error}")
    return ProbeResult(
        True, f"onnxruntime {ort.__version__} runs on CUDAExecutionProvider (device {device_id})"
    )


DEFAULT_PROBES = BackendProbes(cupy=probe_cupy, cuda_provider=probe_cuda_provider)


def _create_stream(device_id: int) -> Any:
    cupy = require_cupy()
    with cupy.cuda.Device(device_id):
        return cupy.cuda.Stream(non_blocking=True)


def choose_backend(
    requested: BackendRequest = "auto",
    *,
    device_id: int = 0,
    probes: BackendProbes = DEFAULT_PROBES,
    stream_factory: Callable[[int], Any] = _create_stream,
) -> ComputeBackend:
    """Pick the backend for `requested` (see the module docstring); logs the choice and its reason once."""
    if requested not in BACKEND_REQUESTS:
        raise GpuUnavailableError(
            f"unknown execution provider {requested!r}; choose one of {BACKEND_REQUESTS}"
        )
    if requested == "cpu":
        backend = ComputeBackend("numpy", "cpu", "CPU requested (execution provider cpu)", device_id)
        logger.info("compute backend: NumPy/OpenCV + CPU EP (%s)", backend.reason)
        return backend
    cupy_probe = probes.cupy()
    provider_probe = probes.cuda_provider(device_id) if cupy_probe.ok else ProbeResult(False, "not probed")
    if cupy_probe.ok and provider_probe.ok:
        provider: ExecutionProvider = "tensorrt" if requested == "tensorrt" else "cuda"
        reason = f"{cupy_probe.reason}; {provider_probe.reason}"
        backend = ComputeBackend("cupy", provider, reason, device_id, stream_factory(device_id))
        logger.info("compute backend: CuPy + %s EP on device %d (%s)", provider, device_id, reason)
        return backend
    failed = cupy_probe if not cupy_probe.ok else provider_probe
    if requested != "auto":
        raise GpuUnavailableError(f"--execution-provider {requested}: {failed.reason}; {GPU_FIX}")
    backend = ComputeBackend("numpy", "cpu", f"GPU path unusable: {failed.reason}", device_id)
    logger.info("compute backend: NumPy/OpenCV + CPU EP (%s)", backend.reason)
    return backend
