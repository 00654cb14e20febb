"""Step 1 of scripts/gpu_check.sh: which onnxruntime/CuPy/GPU this is, and a hard check that a session's
first provider is CUDAExecutionProvider (ORT falls back to CPU silently). Writes $OUT/env.json."""

import json
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout, for streamer/ and models/


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import importlib.util

    import onnxruntime as ort

    from streamer.pipeline.compute_backend import choose_backend, probe_cuda_provider, probe_cupy

    needed = ("numpy", "cv2", "onnx", "pytest", "pytest_asyncio", "av", "aiohttp", "aiortc", "cupy", "torch")
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    report: dict[str, object] = {
        "missing_modules": missing,
        "python": sys.version.split()[0],
        "onnxruntime": ort.__version__,
        "onnxruntime_file": ort.__file__,
        "providers": ort.get_available_providers(),
        "preloaded_cuda": os.environ.get("LIVEFUSE_PRELOADED_CUDA", ""),
        "cupy": vars(probe_cupy()),
        "cuda_provider": vars(probe_cuda_provider(0)),
    }
    try:
        import cupy

        properties = cupy.cuda.runtime.getDeviceProperties(0)
        report["gpu"] = properties["name"].decode()
        report["driver"] = cupy.cuda.runtime.driverGetVersion()
        report["cupy_version"] = cupy.__version__
    except Exception as error:  # noqa: BLE001 - recorded; the verdict below decides
        report["gpu_error"] = repr(error)
    ok = True
    try:
        report["backend"] = choose_backend("cuda").describe()
    except Exception as error:  # noqa: BLE001 - the verdict is the output
        report["backend_error"] = str(error)
        ok = False
    report["ok"] = ok
    text = json.dumps(report, indent=2, default=str)
    sys.stdout.write(text + "\n")
    out = os.environ.get("OUT")
    if out:
        Path(out, "env.json").write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
