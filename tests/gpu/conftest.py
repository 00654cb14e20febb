"""GPU-only tests: everything here is marked `gpu` and skipped unless CuPy and the CUDA EP both work."""

import pytest

from streamer.compute_backend import ComputeBackend, choose_backend

_AUTO = choose_backend("auto")


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
