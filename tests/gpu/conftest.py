"""GPU-only tests: everything here is marked `gpu` and skipped unless CuPy and the CUDA EP both work."""

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from gpu_ops.backend import require_cupy
from streamer.pipeline.compute_backend import ComputeBackend, choose_backend

_AUTO = choose_backend("auto")
FRAME_BYTES = 1280 * 720 * 3 // 2  # a 720p I420 frame


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason=f"no GPU path: {_AUTO.reason}")
    for item in items:
        if "tests/gpu/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not _AUTO.on_gpu:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def gpu_backend() -> ComputeBackend:
    return choose_backend("cuda")


@pytest.fixture(scope="session")
def cpu_backend() -> ComputeBackend:
    return choose_backend("cpu")


class TransferSpy:
    """Counts host<->device transfers made through CuPy's module-level helpers (asarray of host data,
    asnumpy) in addition to DeviceFrames' own ledger: gpu_ops code moves data only through these."""

    def __init__(self, cupy: Any) -> None:
        self.cupy = cupy
        self.sizes: list[tuple[str, int]] = []
        self._asarray, self._asnumpy = cupy.asarray, cupy.asnumpy

    def asarray(self, array: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(array, np.ndarray):
            self.sizes.append(("host_to_device", array.nbytes))
        return self._asarray(array, *args, **kwargs)

    def asnumpy(self, array: Any, *args: Any, **kwargs: Any) -> Any:
        self.sizes.append(("device_to_host", int(array.nbytes)))
        return self._asnumpy(array, *args, **kwargs)

    def frame_sized(self, frame_bytes: int = FRAME_BYTES) -> list[tuple[str, int]]:
        """Transfers of an eighth of a frame or more: nothing but DeviceFrames should move those."""
        return [entry for entry in self.sizes if entry[1] >= frame_bytes // 8]


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[TransferSpy]:
    cupy = require_cupy()
    recorder = TransferSpy(cupy)
    monkeypatch.setattr(cupy, "asarray", recorder.asarray)
    monkeypatch.setattr(cupy, "asnumpy", recorder.asnumpy)
    yield recorder
