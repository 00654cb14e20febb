"""CUDA EP vs CPU EP outputs per model: synthetic look-alikes always, the real small models when present."""

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from numpy.typing import NDArray

from bench.synthetic_swapper import build_synthetic_swapper
from models.inference import create_session
from models.model_files import ModelStore
from models.registry import get_spec
from streamer.pipeline.compute_backend import ComputeBackend
from tests.synthetic_models import build_arcface, build_gfpgan, build_inswapper

pytestmark = pytest.mark.gpu

# fixed sizes for symbolic dims: batch 2 where the batch is free, 320x320 for dynamic detectors
SYMBOLIC_SIZES = (2, 3, 320, 320)


def random_feeds(session: ort.InferenceSession, seed: int) -> dict[str, NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for arg in session.get_inputs():
        shape = [dim if isinstance(dim, int) else SYMBOLIC_SIZES[axis] for axis, dim in enumerate(arg.shape)]
        feeds[arg.name] = rng.random(shape, dtype=np.float32)
    return feeds


def compare_providers(gpu: ort.InferenceSession, cpu: ort.InferenceSession, seed: int = 0) -> list[float]:
    """Relative max |diff| per output (max |diff| / max |cpu|) for the same random inputs."""
    assert gpu.get_providers()[0] == "CUDAExecutionProvider"
    feeds = random_feeds(cpu, seed)
    gpu_outputs: list[Any] = gpu.run(None, feeds)
    cpu_outputs: list[Any] = cpu.run(None, feeds)
    return [
        float(np.abs(g - c).max() / max(1e-6, float(np.abs(c).max())))
        for g, c in zip(gpu_outputs, cpu_outputs)
    ]


@pytest.mark.parametrize(
    ("name", "builder"),
    [
        ("inswapper_128", lambda path: build_inswapper(path, kind="latent_dependent")),
        ("arcface_w600k_r50", build_arcface),
        ("gfpgan_1.4", build_gfpgan),
    ],
)
def test_synthetic_look_alikes_agree(
    name: str, builder: Any, tmp_path: Path, gpu_backend: ComputeBackend, cpu_backend: ComputeBackend
) -> None:
    path = builder(tmp_path / f"{name}.onnx")
    spec = get_spec(name)
    gpu = create_session(path, spec, gpu_backend.inference_config())
    cpu = create_session(path, spec, cpu_backend.inference_config())
    assert max(compare_providers(gpu, cpu)) < 1e-3


def test_inswapper_sized_swapper_agrees(
    tmp_path: Path, gpu_backend: ComputeBackend, cpu_backend: ComputeBackend
) -> None:
    path = tmp_path / "synthetic_inswapper.onnx"
    path.write_bytes(build_synthetic_swapper(0.25).model_bytes)
    spec = get_spec("inswapper_128")
    gpu = create_session(path, spec, gpu_backend.inference_config())
    cpu = create_session(path, spec, cpu_backend.inference_config())
    assert max(compare_providers(gpu, cpu)) < 1e-2  # cuDNN may use TF32 convolutions


@pytest.mark.parametrize("name", ["yunet_n", "facemesh_468", "dlib_resnet_128"])
def test_real_small_models_agree(
    name: str, models_dir: Path, gpu_backend: ComputeBackend, cpu_backend: ComputeBackend
) -> None:
    store = ModelStore(models_dir)
    if not store.is_available(name):
        pytest.skip(f"{name} is not in {models_dir}")
    gpu = store.session(name, gpu_backend.inference_config())
    cpu = store.session(name, cpu_backend.inference_config())
    assert max(compare_providers(gpu, cpu)) < 1e-2


def test_sessions_share_the_engine_stream(tmp_path: Path, gpu_backend: ComputeBackend) -> None:
    path = build_arcface(tmp_path / "arcface.onnx")
    session = create_session(path, get_spec("arcface_w600k_r50"), gpu_backend.inference_config())
    options = session.get_provider_options()["CUDAExecutionProvider"]
    assert options.get("has_user_compute_stream") == "1"
    assert int(options["user_compute_stream"]) == gpu_backend.stream_handle
