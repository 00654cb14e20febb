"""The inswapper-sized synthetic swapper: inswapper's IO contract, symbolic batch, latent-driven output."""

import numpy as np
import onnxruntime as ort
import pytest

from bench.synthetic_swapper import build_synthetic_swapper
from models.inference import check_contract
from models.registry import get_spec


@pytest.fixture(scope="module")
def small_session() -> ort.InferenceSession:
    built = build_synthetic_swapper(1.0 / 16)
    return ort.InferenceSession(built.model_bytes, providers=["CPUExecutionProvider"])


def test_contract_matches_inswapper_with_a_symbolic_batch(small_session: ort.InferenceSession) -> None:
    check_contract(small_session, get_spec("inswapper_128"))
    assert isinstance(small_session.get_inputs()[0].shape[0], str)


def test_batch_of_three_equals_three_single_runs(small_session: ort.InferenceSession) -> None:
    rng = np.random.default_rng(0)
    target = rng.random((3, 3, 128, 128), dtype=np.float32)
    source = rng.standard_normal((3, 512)).astype(np.float32)
    (batched,) = small_session.run(None, {"target": target, "source": source})
    assert batched.shape == (3, 3, 128, 128)
    assert batched.min() >= 0.0 and batched.max() <= 1.0
    for index in range(3):
        (single,) = small_session.run(
            None, {"target": target[index : index + 1], "source": source[index : index + 1]}
        )
        np.testing.assert_allclose(single[0], batched[index], atol=1e-4)


def test_output_depends_on_the_source_latent(small_session: ort.InferenceSession) -> None:
    rng = np.random.default_rng(1)
    target = rng.random((1, 3, 128, 128), dtype=np.float32)
    outputs = [
        small_session.run(
            None, {"target": target, "source": rng.standard_normal((1, 512)).astype(np.float32)}
        )[0]
        for _ in range(2)
    ]
    assert np.abs(outputs[0] - outputs[1]).mean() > 1e-3


def test_size_figures_scale_with_width() -> None:
    narrow, wider = build_synthetic_swapper(1.0 / 32), build_synthetic_swapper(1.0 / 16)
    assert 3.0 < wider.gflops_per_face / narrow.gflops_per_face < 4.5  # convolutions scale with width^2
    assert 2.0 < wider.parameters / narrow.parameters < 4.5  # AdaIN projections grow linearly
    assert len(wider.model_bytes) > 4 * wider.parameters  # float32 weights are all in the file
