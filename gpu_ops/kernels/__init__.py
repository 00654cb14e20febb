"""Every CUDA C source of gpu_ops, in one registry: the GPU ops compile from it, the NVRTC check too.

`ALL_SOURCES` is a plain tuple of (name, source). Each `<name>.cu` file in this folder is one entry;
to add a kernel, drop a `.cu` file here (or, for a source kept as a string in its op module, append
`("name", SOURCE)` to the tuple below). `common.cuh` (scalar types, OpenCV's line clipping) is
prepended to every source here, so every consumer (CuPy, the NVRTC check, the host-run tests) compiles
one copy of it; a `#line` directive keeps compiler messages on the .cu file's own lines. Sources include
no CUDA headers, so NVRTC compiles them without a CUDA toolkit (tests/unit/gpu_ops/test_kernels_compile.py).
"""

from pathlib import Path

from gpu_ops.errors import LivefuseError

KERNELS_DIR = Path(__file__).resolve().parent


COMMON_HEADER = KERNELS_DIR / "common.cuh"


def _with_common_header(path: Path) -> str:
    return f'{COMMON_HEADER.read_text(encoding="utf-8")}\n#line 1 "{path.name}"\n{path.read_text(encoding="utf-8")}'


def _read_sources() -> tuple[tuple[str, str], ...]:
    return tuple((path.stem, _with_common_header(path)) for path in sorted(KERNELS_DIR.glob("*.cu")))


ALL_SOURCES: tuple[tuple[str, str], ...] = _read_sources()


def kernel_source(name: str) -> str:
    """The CUDA C source registered under `name` (the .cu file stem)."""
    for source_name, source in ALL_SOURCES:
        if source_name == name:
            return source
    known = ", ".join(source_name for source_name, _ in ALL_SOURCES)
    raise LivefuseError(f"no kernel source named {name!r}; known: {known}")
