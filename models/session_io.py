"""Running an ONNX Runtime session on host (NumPy) or device (CuPy) tensors, one place for every role.

On the GPU path a model input is cut from a device frame and must not cross the bus: device inputs are
bound in place (IOBinding) when the session runs on CUDA. Outputs go where their consumer is: the
swapper's and enhancer's pixels stay on the device (`run_to_device`); detector boxes, landmark points
and embeddings are a few KB that host code decodes, so ORT copies them out (`run_to_host`). A CPU
session given device inputs gets them downloaded: that is the mixed case `compute_backend` never picks,
kept working for tests and tools.

When the session was built with `user_compute_stream` equal to CuPy's current stream, kernels and model
are already ordered on one stream and no host sync is made; otherwise the stream is synchronised first
so ORT never reads an input a kernel is still writing.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

from gpu_ops.backend import is_device_array, require_cupy, to_host

GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")


def _numpy_dtype(ort_type: str) -> type[np.floating]:
    return np.float16 if ort_type == "tensor(float16)" else np.float32


def declared_input_dtypes(session: ort.InferenceSession) -> dict[str, type[np.floating]]:
    return {arg.name: _numpy_dtype(arg.type) for arg in session.get_inputs()}


def _on_gpu(session: ort.InferenceSession) -> bool:
    return session.get_providers()[0] in GPU_PROVIDERS


def shares_current_stream(session: ort.InferenceSession, cupy: Any) -> bool:
    """True when ORT runs this session on CuPy's current stream (no host sync needed before a run)."""
    options = session.get_provider_options().get(session.get_providers()[0], {})
    if options.get("has_user_compute_stream") not in ("1", 1, True):
        return False
    return str(options.get("user_compute_stream")) == str(cupy.cuda.get_current_stream().ptr)


def _bind_inputs(
    session: ort.InferenceSession, inputs: Mapping[str, Any], cupy: Any
) -> tuple[Any, list[Any]]:
    """An IOBinding with device inputs bound in place; returns it and the buffers it must outlive."""
    declared = declared_input_dtypes(session)
    binding = session.io_binding()
    kept_alive: list[Any] = []
    for name, array in inputs.items():
        if is_device_array(array):
            bound = cupy.ascontiguousarray(array, dtype=declared[name])
            kept_alive.append(bound)
            binding.bind_input(
                name, "cuda", bound.device.id, bound.dtype.type, list(bound.shape), bound.data.ptr
            )
        else:
            binding.bind_cpu_input(name, np.ascontiguousarray(array, dtype=declared[name]))
    if not shares_current_stream(session, cupy):
        cupy.cuda.get_current_stream().synchronize()  # ORT's own stream must not overtake our kernels
    return binding, kept_alive


def _host_run(
    session: ort.InferenceSession, inputs: Mapping[str, Any], output_names: Sequence[str]
) -> list[Any]:
    declared = declared_input_dtypes(session)
    feeds = {name: to_host(array).astype(declared[name], copy=False) for name, array in inputs.items()}
    return [np.asarray(output) for output in session.run(list(output_names), feeds)]


def run_to_host(
    session: ort.InferenceSession, inputs: Mapping[str, Any], output_names: Sequence[str]
) -> list[np.ndarray]:
    """Outputs as NumPy arrays, whether the inputs are NumPy or CuPy (bound in place on a CUDA session)."""
    if not any(is_device_array(array) for array in inputs.values()) or not _on_gpu(session):
        return _host_run(session, inputs, output_names)
    cupy = require_cupy()
    binding, kept_alive = _bind_inputs(session, inputs, cupy)
    for name in output_names:
        binding.bind_output(name)  # ORT allocates it on the host and copies the few KB out
    session.run_with_iobinding(binding)
    del kept_alive
    return [np.asarray(output) for output in binding.copy_outputs_to_cpu()]


def run_to_device(
    session: ort.InferenceSession,
    inputs: Mapping[str, Any],
    output_name: str,
    output_shape: tuple[int, ...],
) -> Any:
    """One float32 output where the inputs are: NumPy in, NumPy out; CuPy in, CuPy out (preallocated by
    CuPy and bound in place on a CUDA session; a host round trip on a CPU session)."""
    if not any(is_device_array(array) for array in inputs.values()):
        (output,) = _host_run(session, inputs, [output_name])
        return np.asarray(output, dtype=np.float32)
    cupy = require_cupy()
    if not _on_gpu(session):
        (output,) = _host_run(session, inputs, [output_name])
        return cupy.asarray(output, dtype=cupy.float32)
    output_type = next(arg.type for arg in session.get_outputs() if arg.name == output_name)
    output = cupy.empty(output_shape, dtype=_numpy_dtype(output_type))
    binding, kept_alive = _bind_inputs(session, inputs, cupy)
    binding.bind_output(
        output_name, "cuda", output.device.id, output.dtype.type, list(output.shape), output.data.ptr
    )
    session.run_with_iobinding(binding)
    del kept_alive
    return output.astype(cupy.float32, copy=False)


def run_chunked_to_host(
    session: ort.InferenceSession,
    input_name: str,
    tensor: Any,
    output_names: Sequence[str],
    max_batch: int | None,
) -> list[np.ndarray]:
    """`run_to_host` over the batch axis in chunks of the file's fixed batch size (None: one run)."""
    chunk = max_batch or len(tensor)
    runs = [
        run_to_host(session, {input_name: tensor[start : start + chunk]}, output_names)
        for start in range(0, len(tensor), chunk)
    ]
    return [np.concatenate([run[index] for run in runs]) for index in range(len(output_names))]


def fixed_batch_size(session: ort.InferenceSession) -> int | None:
    """The file's fixed batch dimension of its first input, or None when it is symbolic."""
    batch_dim = session.get_inputs()[0].shape[0]
    return batch_dim if isinstance(batch_dim, int) else None
