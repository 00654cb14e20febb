"""One-Euro filter behaviour: pass-through start, jitter removed when still, little lag when moving."""

import numpy as np
import pytest

from streamer.pipeline.smoothing import OneEuroConfig, OneEuroFilter, smoothing_factor

FACE_SIZE = 200.0
FPS = 30.0


def filtered(signal: np.ndarray, config: OneEuroConfig | None = None) -> np.ndarray:
    smoother = OneEuroFilter(config)
    return np.array([smoother.filter(value, n / FPS, 1.0 / FACE_SIZE) for n, value in enumerate(signal)])


def test_first_sample_passes_through_and_keeps_shape() -> None:
    smoother = OneEuroFilter()
    value = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = smoother.filter(value, 0.0)
    assert out.dtype == np.float32 and out.shape == (3, 2)
    np.testing.assert_array_equal(out, value)


def test_still_point_jitter_is_reduced() -> None:
    noise = np.random.default_rng(0).normal(0.0, 1.0, (300, 2))
    out = filtered(100.0 + noise)
    assert out[60:].std(axis=0).max() < 0.5 * noise[60:].std(axis=0).min()
    assert np.abs(out[60:].mean(axis=0) - 100.0).max() < 0.3


def test_moving_point_lags_little_and_less_than_a_slow_filter() -> None:
    positions = 100.0 + np.arange(90) / FPS * FACE_SIZE  # one face size per second
    lag = positions[30:] - filtered(positions)[30:]
    slow_lag = positions[30:] - filtered(positions, OneEuroConfig(min_cutoff=0.5, beta=0.0))[30:]
    assert np.abs(lag).max() < 2.0
    assert slow_lag.mean() > 5 * lag.mean()


def test_repeated_timestamp_returns_the_previous_output() -> None:
    smoother = OneEuroFilter()
    smoother.filter(np.array([0.0]), 0.0)
    first = smoother.filter(np.array([10.0]), 0.1, 0.01)
    assert smoother.filter(np.array([50.0]), 0.1, 0.01) == pytest.approx(first)


def test_reset_and_shape_change_restart_the_filter() -> None:
    smoother = OneEuroFilter()
    smoother.filter(np.array([0.0]), 0.0)
    smoother.reset()
    assert smoother.filter(np.array([7.0]), 0.1) == pytest.approx([7.0])
    assert smoother.filter(np.array([1.0, 2.0]), 0.2) == pytest.approx([1.0, 2.0])


def test_smoothing_factor_grows_with_cutoff() -> None:
    assert smoothing_factor(1 / 30, 1.0) < smoothing_factor(1 / 30, 10.0) < 1.0
