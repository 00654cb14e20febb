"""Every registry row against the real file in `models_dir`: sha256, size and the ONNX IO contract.

Rows whose files cannot be had on this machine (the user-downloaded swapper, ArcFace, GFPGAN) are
skipped by name, with the reason; the offline default set must always be there.
"""

from pathlib import Path

import numpy as np
import pytest

from models.inference import InferenceConfig
from models.model_files import ModelStore, sha256_of_file
from models.registry import MODELS, ModelSpec

SPECS = list(MODELS.values())
OFFLINE_DEFAULT_SET = ("yunet_n", "facemesh_468", "dlib_resnet_128")
CONFIG = InferenceConfig(execution_provider="cpu", intra_op_threads=1)


def _present(models_dir: Path, spec: ModelSpec) -> Path:
    path = models_dir / spec.file_name
    if not path.is_file():
        pytest.skip(f"{spec.file_name} is not in {models_dir} (users download it)")
    return path


def test_offline_default_set_is_present(models_dir: Path) -> None:
    store = ModelStore(models_dir)
    assert all(store.is_available(name) for name in OFFLINE_DEFAULT_SET)


@pytest.mark.parametrize("spec", SPECS, ids=[spec.name for spec in SPECS])
def test_file_matches_registered_hash_and_size(models_dir: Path, spec: ModelSpec) -> None:
    path = _present(models_dir, spec)
    if spec.sha256 is None:
        pytest.skip(f"{spec.name} has no registered hash; it is pinned on download")
    assert path.stat().st_size == spec.size_bytes
    assert sha256_of_file(path) == spec.sha256
    assert ModelStore(models_dir).check(spec.name).ok


@pytest.mark.parametrize("spec", SPECS, ids=[spec.name for spec in SPECS])
def test_session_matches_io_contract(models_dir: Path, spec: ModelSpec) -> None:
    _present(models_dir, spec)
    session = ModelStore(models_dir).session(spec.name, CONFIG)  # verifies, then checks the contract
    inputs = {arg.name: arg for arg in session.get_inputs()}
    outputs = {arg.name for arg in session.get_outputs()}
    assert set(inputs) == {tensor.name for tensor in spec.inputs}
    assert outputs >= {tensor.name for tensor in spec.outputs}
    for tensor in spec.inputs:
        assert inputs[tensor.name].type == f"tensor({tensor.dtype.replace('float32', 'float')})"


@pytest.mark.parametrize("spec", SPECS, ids=[spec.name for spec in SPECS])
def test_session_runs_on_its_declared_input(models_dir: Path, spec: ModelSpec) -> None:
    """A zero input of the declared size yields every declared output with the declared fixed dims."""
    _present(models_dir, spec)
    session = ModelStore(models_dir).session(spec.name, CONFIG)
    feeds: dict[str, np.ndarray] = {}
    for tensor in spec.inputs:
        # dynamic spatial dims get 64 (a multiple of every detector stride); dynamic batch gets 1
        shape = [
            dim if dim is not None else (1 if axis == 0 else 64) for axis, dim in enumerate(tensor.shape)
        ]
        feeds[tensor.name] = np.zeros(shape, dtype=np.float32)
    results = session.run([tensor.name for tensor in spec.outputs], feeds)
    for tensor, result in zip(spec.outputs, results):
        assert result.ndim == len(tensor.shape), tensor.name
        for axis, dim in enumerate(tensor.shape):
            if dim is not None:
                assert result.shape[axis] == dim, (tensor.name, axis)
