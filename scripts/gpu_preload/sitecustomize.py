"""Loaded at interpreter start when scripts/gpu_preload is on PYTHONPATH (scripts/gpu_check.sh puts it
there): RTLD_GLOBAL-loads the CUDA 13 / cuDNN 9 libraries that torch's pip dependencies install under
site-packages/nvidia, so the unpacked onnxruntime-gpu (which ships no CUDA libraries) resolves its NEEDED
sonames in every process the check starts (pytest, run_stream.py bench). Logic from the shared
device_check.py. Never imported by the product."""

import ctypes
import importlib.util
import os

CUDA_LIBRARIES = (
    "cu13/lib/libcudart.so.13",
    "cu13/lib/libcublasLt.so.13",
    "cu13/lib/libcublas.so.13",
    "cu13/lib/libcurand.so.10",
    "cu13/lib/libcufft.so.12",
    "cu13/lib/libnvrtc.so.13",
    "cudnn/lib/libcudnn.so.9",
)


def preload_cuda_libraries() -> list[str]:
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
    loaded = []
    for relative in CUDA_LIBRARIES:
        for root in roots:
            path = os.path.join(root, relative)
            if os.path.exists(path):
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                loaded.append(relative)
                break
    return loaded


def preload_through_torch() -> str:
    """Fallback when the pip layout differs: importing torch loads its CUDA libraries globally."""
    try:
        import torch  # noqa: F401 - imported for its side effect

        return "torch"
    except Exception as error:  # noqa: BLE001 - recorded in the environment for env.json
        return f"torch import failed: {type(error).__name__}"


if os.environ.get("LIVEFUSE_PRELOAD_CUDA") == "1":
    loaded = preload_cuda_libraries()
    if not any("cudart" in name for name in loaded) or not any("cudnn" in name for name in loaded):
        loaded.append(preload_through_torch())
    os.environ["LIVEFUSE_PRELOADED_CUDA"] = ",".join(loaded)
