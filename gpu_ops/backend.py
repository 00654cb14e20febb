"""Array-module dispatch: which arrays live on the GPU, and whether CuPy can be used at all.

CuPy is optional. It is imported lazily, once, so every module of gpu_ops imports (and the CPU path
runs) on machines without CUDA. Callers never branch on the device: ops call `is_device_array(x)` or
`get_array_module(x)` and pick their `_gpu` or `_cpu` implementation.
"""

import logging
import threading
from types import ModuleType
from typing import Any

import numpy as np

from gpu_ops.errors import GpuUnavailableError
from gpu_ops.kernels import kernel_source

logger = logging.getLogger(__name__)

_import_lock = threading.Lock()
_cupy_module: ModuleType | None = None
_cupy_reason: str | None = None  # None until the first import attempt

_kernel_lock = threading.Lock()
_compiled_modules: dict[tuple[str, tuple[str, ...]], Any] = {}

# --fmad=false: no fused multiply-add contraction, so float maths rounds as the CPU mirror does.
DEFAULT_NVRTC_OPTIONS: tuple[str, ...] = ("--std=c++14", "--fmad=false")


def _import_cupy() -> ModuleType | None:
    """Import CuPy once and probe for a device; remember why it failed."""
    global _cupy_module, _cupy_reason
    with _import_lock:
        if _cupy_reason is not None:
            return _cupy_module
        try:
            import cupy  # optional dependency: imported on first use only

            device_count = cupy.cuda.runtime.getDeviceCount()
            if device_count < 1:
                raise RuntimeError("no CUDA device visible")
        except Exception as error:  # noqa: BLE001 - ImportError, CUDARuntimeError, driver mismatch: all mean CPU
            _cupy_module = None
            _cupy_reason = f"CuPy unusable: {type(error).__name__}: {error}"
            logger.info("array backend: NumPy/OpenCV (%s)", _cupy_reason)
        else:
            _cupy_module = cupy
            _cupy_reason = f"CuPy {cupy.__version__} with {device_count} CUDA device(s)"
            logger.info("array backend: %s", _cupy_reason)
        return _cupy_module


def cupy_available() -> tuple[bool, str]:
    """Whether CuPy imports and sees a CUDA device, and the reason in words (for logs and skips)."""
    module = _import_cupy()
    assert _cupy_reason is not None
    return module is not None, _cupy_reason


def require_cupy() -> ModuleType:
    """The CuPy module, or GpuUnavailableError saying why it cannot be used."""
    module = _import_cupy()
    if module is None:
        raise GpuUnavailableError(f"GPU path requested but {_cupy_reason}")
    return module


def is_device_array(array: Any) -> bool:
    """True for CuPy arrays. Never imports CuPy: a NumPy array is answered without it."""
    if isinstance(array, np.ndarray):
        return False
    module = type(array).__module__
    return module.startswith("cupy") and _import_cupy() is not None


def get_array_module(array: Any) -> ModuleType:
    """`cupy` for CuPy arrays, `numpy` for everything else (like `cupy.get_array_module`)."""
    if is_device_array(array):
        return require_cupy()
    return np


def to_host(array: Any) -> np.ndarray:
    """A NumPy copy (or the array itself) of a NumPy or CuPy array."""
    if is_device_array(array):
        return require_cupy().asnumpy(array)
    return np.asarray(array)


def get_kernel(source_name: str, function_name: str, options: tuple[str, ...] = DEFAULT_NVRTC_OPTIONS) -> Any:
    """A compiled `cupy.RawKernel` for one function of a registered kernel source (compiled once)."""
    cupy = require_cupy()
    key = (source_name, options)
    with _kernel_lock:
        raw_module = _compiled_modules.get(key)
        if raw_module is None:
            raw_module = cupy.RawModule(code=kernel_source(source_name), options=options)
            _compiled_modules[key] = raw_module
            logger.debug("compiled kernel source %s with %s", source_name, options)
    return raw_module.get_function(function_name)
