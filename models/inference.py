"""ONNX Runtime session factory: one place that picks providers, checks the IO contract and says what ran.

ORT silently falls back to the CPU provider when CUDA cannot load; a daemon that thinks it is on the GPU
while running on two CPU cores is worse than one that refuses, so an explicit `cuda`/`tensorrt` request
that does not end up active raises `GpuUnavailableError`.
"""

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import onnxruntime as ort

from models.errors import GpuUnavailableError, ModelContractError
from models.registry import ModelSpec, TensorSpec

logger = logging.getLogger(__name__)

ExecutionProvider = Literal["cpu", "cuda", "tensorrt"]
EXECUTION_PROVIDERS: tuple[ExecutionProvider, ...] = get_args(ExecutionProvider)

_ORT_NAMES: dict[ExecutionProvider, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}


@dataclass(frozen=True)
class InferenceConfig:
    """How sessions are built. `user_compute_stream` is a CUDA stream handle (int) shared with CuPy."""

    execution_provider: ExecutionProvider = "cpu"
    device_id: int = 0
    intra_op_threads: int = 0  # 0: ORT's default (all cores)
    user_compute_stream: int | None = None
    tensorrt_cache_dir: str | None = None
    cuda_graphs: bool = False


def available_providers() -> list[str]:
    """Providers this onnxruntime build offers (not a promise that they load)."""
    return list(ort.get_available_providers())


def provider_chain(config: InferenceConfig) -> list[tuple[str, dict[str, Any]]]:
    """(provider, options) in ORT's order of preference for this config; CPU always last."""
    stream_options: dict[str, Any] = {}  # both GPU providers run on the kernels' stream when given one
    if config.user_compute_stream is not None:
        stream_options = {
            "user_compute_stream": str(config.user_compute_stream),
            "has_user_compute_stream": "1",
        }
    cuda_options: dict[str, Any] = {"device_id": config.device_id, **stream_options}
    if config.cuda_graphs:
        cuda_options["enable_cuda_graph"] = "1"
    chain: list[tuple[str, dict[str, Any]]] = []
    if config.execution_provider == "tensorrt":
        trt_options: dict[str, Any] = {
            "device_id": config.device_id,
            "trt_fp16_enable": True,
            **stream_options,
        }
        if config.tensorrt_cache_dir:
            Path(config.tensorrt_cache_dir).mkdir(parents=True, exist_ok=True)
            trt_options.update(
                trt_engine_cache_enable=True,
                trt_engine_cache_path=config.tensorrt_cache_dir,
                trt_timing_cache_enable=True,
                trt_timing_cache_path=config.tensorrt_cache_dir,
            )
        chain.append((_ORT_NAMES["tensorrt"], trt_options))
    if config.execution_provider in ("cuda", "tensorrt"):
        chain.append((_ORT_NAMES["cuda"], cuda_options))
    chain.append((_ORT_NAMES["cpu"], {}))
    return chain


def check_contract(session: ort.InferenceSession, spec: ModelSpec) -> None:
    """Raise ModelContractError unless the session's IO names and fixed dims match the spec."""

    def compare(kind: str, actual: list[Any], expected: tuple[TensorSpec, ...]) -> None:
        actual_by_name = {arg.name: arg for arg in actual}
        for tensor in expected:
            arg = actual_by_name.get(tensor.name)
            if arg is None:
                raise ModelContractError(
                    f"{spec.file_name}: {kind} {tensor.name!r} missing (has {sorted(actual_by_name)}); "
                    f"is this really {spec.name}?"
                )
            shape = list(arg.shape)
            if len(shape) != len(tensor.shape):
                raise ModelContractError(
                    f"{spec.file_name}: {kind} {tensor.name!r} has rank {len(shape)}, expected {len(tensor.shape)}"
                )
            for axis, (have, want) in enumerate(zip(shape, tensor.shape)):
                if want is not None and isinstance(have, int) and have != want:
                    raise ModelContractError(
                        f"{spec.file_name}: {kind} {tensor.name!r} dim {axis} is {have}, expected {want}"
                    )

    compare("input", session.get_inputs(), spec.inputs)
    compare("output", session.get_outputs(), spec.outputs)


def create_session(model_path: Path, spec: ModelSpec, config: InferenceConfig) -> ort.InferenceSession:
    """Build a session for an already verified file, check its contract and log the active provider."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if config.intra_op_threads:
        options.intra_op_num_threads = config.intra_op_threads
    options.log_severity_level = 3  # ORT's own warnings are noise here; we log what matters ourselves
    requested = _ORT_NAMES[config.execution_provider]
    chain = provider_chain(config)
    if requested not in available_providers():
        raise GpuUnavailableError(
            f"--execution-provider {config.execution_provider}: this onnxruntime build has only "
            f"{available_providers()}; install requirements-gpu.txt (onnxruntime-gpu) or use cpu"
        )
    started = time.perf_counter()
    session = ort.InferenceSession(
        str(model_path),
        sess_options=options,
        providers=[name for name, _ in chain],
        provider_options=[opts for _, opts in chain],
    )
    active = session.get_providers()
    if active[0] != requested:
        raise GpuUnavailableError(
            f"{spec.name}: asked for {requested} but onnxruntime activated {active[0]} "
            "(CUDA/cuDNN libraries missing or no device); use --execution-provider cpu"
        )
    check_contract(session, spec)
    logger.info(
        "model %s loaded from %s on %s in %.0f ms",
        spec.name,
        model_path,
        active[0],
        (time.perf_counter() - started) * 1000.0,
    )
    return session


def active_provider(session: ort.InferenceSession) -> str:
    """The provider ORT really placed the session on (first of its active list)."""
    return str(session.get_providers()[0])
