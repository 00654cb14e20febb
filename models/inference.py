"""ONNX Runtime session factory: one place that picks providers, checks the IO contract and says what ran.

ORT silently falls back to the CPU provider when CUDA cannot load; a daemon that thinks it is on the GPU
while running on two CPU cores is worse than one that refuses, so an explicit `cuda`/`tensorrt` request
that does not end up active raises `GpuUnavailableError`.

Thread counts are chosen here too (`plan_threads`): ORT's default, one intra-op thread per core that
spin-waits after every run, took 1.3 of this 2-core machine's cores during a live call and left the
codec threads starved; one thread per session and no spinning did the same work in 0.6 of a core
(docs/benchmarks.md, "Where a live call's CPU goes").
"""

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import onnxruntime as ort

from models.cpu_graph import cpu_session_source
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
    intra_op_threads: int = 0  # 0: chosen for the cores by plan_threads
    allow_spinning: bool = False  # intra-op threads busy-wait between runs (ORT's default: on)
    user_compute_stream: int | None = None
    tensorrt_cache_dir: str | None = None
    cuda_graphs: bool = False


@dataclass(frozen=True)
class ThreadPlan:
    """Intra-op threads and spin-waiting of every session, and why (logged with each session)."""

    intra_op_threads: int
    allow_spinning: bool
    reason: str


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def plan_threads(config: InferenceConfig, cores: int | None = None) -> ThreadPlan:
    """The worker thread runs one session at a time while decoders and encoders run beside it: a few
    intra-op threads help a frame's latency on many cores, but on a few cores every extra (spinning)
    thread is taken from the codecs. So: 1 thread up to 4 cores, then a quarter of the cores (at most
    4); no spinning unless asked. An explicit count wins."""
    cores = usable_cores() if cores is None else cores
    if config.intra_op_threads > 0:
        threads, reason = config.intra_op_threads, "set by --intra-op-threads"
    elif config.execution_provider != "cpu":
        threads, reason = 1, "the GPU runs the graph; CPU threads only for host-side nodes"
    elif cores <= 4:
        threads, reason = 1, f"{cores} cores: extra ORT threads would take them from the codecs"
    else:
        threads, reason = min(4, cores // 4), f"{cores} cores: a quarter for each session's intra-op pool"
    return ThreadPlan(threads, config.allow_spinning, reason)


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
    threads = plan_threads(config)
    options.intra_op_num_threads = threads.intra_op_threads
    options.inter_op_num_threads = 1  # sequential execution: no inter-op pool is used
    spinning = "1" if threads.allow_spinning else "0"
    options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
    options.add_session_config_entry("session.inter_op.allow_spinning", spinning)
    options.log_severity_level = 3  # ORT's own warnings are noise here; we log what matters ourselves
    requested = _ORT_NAMES[config.execution_provider]
    chain = provider_chain(config)
    if requested not in available_providers():
        raise GpuUnavailableError(
            f"--execution-provider {config.execution_provider}: this onnxruntime build has only "
            f"{available_providers()}; install requirements-gpu.txt (onnxruntime-gpu) or use cpu"
        )
    started = time.perf_counter()
    source: str | bytes = str(model_path)
    split = 0
    if config.execution_provider == "cpu":
        source, split = cpu_session_source(model_path)
    session = ort.InferenceSession(
        source,
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
        "model %s loaded from %s on %s%s in %.0f ms; %d intra-op thread(s), spinning %s (%s)",
        spec.name,
        model_path,
        active[0],
        f" ({split} PRelu split for the CPU provider)" if split else "",
        (time.perf_counter() - started) * 1000.0,
        threads.intra_op_threads,
        "on" if threads.allow_spinning else "off",
        threads.reason,
    )
    return session


def active_provider(session: ort.InferenceSession) -> str:
    """The provider ORT really placed the session on (first of its active list)."""
    return str(session.get_providers()[0])
