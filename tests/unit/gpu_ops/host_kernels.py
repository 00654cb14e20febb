"""Running gpu_ops' CUDA sources on the CPU: g++ builds them with a small shim that stands in for the CUDA
built-ins, and ctypes launches each block of the grid in turn. Shared by the host-run kernel tests."""

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gpu_ops.kernels import kernel_source

COMPILER = shutil.which("g++")


def build_host_kernels(folder: Path, sources: tuple[str, ...], shim: str) -> ctypes.CDLL:
    """Write `sources` (gpu_ops/kernels names) and the shim that #includes them, build, load."""
    if COMPILER is None:
        pytest.skip("g++ not installed: kernels cannot be run on the host")
    for name in sources:
        (folder / f"{name}.cu").write_text(kernel_source(name))
    (folder / "shim.cpp").write_text(shim)
    library = folder / "libkernels.so"
    # no fused multiply-add: the same rounding as NVRTC with --fmad=false
    command = [
        COMPILER,
        "-O1",
        "-ffp-contract=off",
        "-fPIC",
        "-shared",
        "-o",
        str(library),
        str(folder / "shim.cpp"),
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    return ctypes.CDLL(str(library))


def pointer(array: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(array.ctypes.data)


def grid(width: int, height: int) -> tuple[int, int]:
    """Blocks of 32x8 threads covering width x height, as the GPU launches use."""
    return (width + 31) // 32, (height + 7) // 8
