"""Compile CUDA C sources with NVRTC through ctypes: catches kernel build errors on machines with no GPU.

NVRTC needs no device and no CUDA toolkit: the pip wheel `nvidia-cuda-nvrtc` ships libnvrtc.so. This
module finds that library (the wheel's folder, then the system's), compiles one source for one
architecture with the same options the GPU path uses, and returns the log and the kernel entry
points found in the PTX. Used by tests/unit/gpu_ops/test_kernels_compile.py.
"""

import ctypes
import ctypes.util
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from gpu_ops.backend import DEFAULT_NVRTC_OPTIONS
from gpu_ops.errors import GpuUnavailableError

logger = logging.getLogger(__name__)

ARCHITECTURES: tuple[str, ...] = ("sm_80", "sm_90")
_SYSTEM_NAMES = ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12")
_PTX_ENTRY = re.compile(r"\.entry\s+([A-Za-z_][A-Za-z0-9_]*)")
_library_lock = threading.Lock()
_library: ctypes.CDLL | None = None


@dataclass(frozen=True)
class CompileResult:
    """Outcome of one NVRTC compilation: `ok`, the compiler log, and the `extern "C"` kernels in the PTX."""

    name: str
    architecture: str
    ok: bool
    log: str
    entry_points: tuple[str, ...]


def _wheel_library_paths() -> list[Path]:
    try:
        import nvidia  # namespace package of the NVIDIA pip wheels, optional
    except ImportError:
        return []
    paths: list[Path] = []
    for root in getattr(nvidia, "__path__", []):
        paths.extend(sorted(Path(root).glob("*/lib/libnvrtc.so*")))
    return [path for path in paths if "builtins" not in path.name]


def find_nvrtc() -> str | None:
    """Path or soname of a loadable libnvrtc, preferring the pip wheel's copy; None when there is none."""
    for path in _wheel_library_paths():
        return str(path)
    found = ctypes.util.find_library("nvrtc")
    if found:
        return found
    for name in _SYSTEM_NAMES:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return name
    return None


def _load_nvrtc() -> ctypes.CDLL:
    global _library
    with _library_lock:
        if _library is None:
            location = find_nvrtc()
            if location is None:
                raise GpuUnavailableError("libnvrtc not found: pip install nvidia-cuda-nvrtc (needs no GPU)")
            library = ctypes.CDLL(location)
            library.nvrtcGetErrorString.restype = ctypes.c_char_p
            library.nvrtcGetErrorString.argtypes = [ctypes.c_int]
            _library = library
            logger.info("NVRTC %s loaded from %s", nvrtc_version(library), location)
        return _library


def nvrtc_version(library: ctypes.CDLL | None = None) -> str:
    """NVRTC's version as 'major.minor'."""
    library = library or _load_nvrtc()
    major, minor = ctypes.c_int(), ctypes.c_int()
    library.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def nvrtc_available() -> tuple[bool, str]:
    """Whether NVRTC can be loaded here, and the reason in words (for test skips)."""
    try:
        return True, f"NVRTC {nvrtc_version(_load_nvrtc())}"
    except (GpuUnavailableError, OSError) as error:
        return False, str(error)


def _check(library: ctypes.CDLL, status: int, call: str) -> None:
    if status != 0:
        message = library.nvrtcGetErrorString(status).decode()
        raise GpuUnavailableError(f"NVRTC {call} failed: {message}")


def compile_source(
    source: str, name: str, architecture: str = "sm_90", options: tuple[str, ...] = DEFAULT_NVRTC_OPTIONS
) -> CompileResult:
    """Compile one CUDA C source to PTX for `architecture` (e.g. sm_80, sm_90) with the GPU path's options."""
    library = _load_nvrtc()
    program = ctypes.c_void_p()
    _check(
        library,
        library.nvrtcCreateProgram(
            ctypes.byref(program), source.encode(), f"{name}.cu".encode(), 0, None, None
        ),
        "nvrtcCreateProgram",
    )
    try:
        arguments = [f"--gpu-architecture={architecture}".encode(), *(option.encode() for option in options)]
        option_array = (ctypes.c_char_p * len(arguments))(*arguments)
        status = library.nvrtcCompileProgram(program, len(arguments), option_array)
        log_size = ctypes.c_size_t()
        _check(
            library, library.nvrtcGetProgramLogSize(program, ctypes.byref(log_size)), "nvrtcGetProgramLogSize"
        )
        log_buffer = ctypes.create_string_buffer(log_size.value)
        _check(library, library.nvrtcGetProgramLog(program, log_buffer), "nvrtcGetProgramLog")
        entry_points: tuple[str, ...] = ()
        if status == 0:
            ptx_size = ctypes.c_size_t()
            _check(library, library.nvrtcGetPTXSize(program, ctypes.byref(ptx_size)), "nvrtcGetPTXSize")
            ptx_buffer = ctypes.create_string_buffer(ptx_size.value)
            _check(library, library.nvrtcGetPTX(program, ptx_buffer), "nvrtcGetPTX")
            entry_points = tuple(_PTX_ENTRY.findall(ptx_buffer.value.decode(errors="replace")))
        log = log_buffer.value.decode(errors="replace")
        logger.debug("NVRTC %s for %s: status %d", name, architecture, status)
        return CompileResult(name, architecture, status == 0, log, entry_points)
    finally:
        library.nvrtcDestroyProgram(ctypes.byref(program))
