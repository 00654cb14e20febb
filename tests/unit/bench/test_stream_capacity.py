"""Virtual-time replay of N 30 fps streams through the batching policy with given batch times."""

import pytest

from bench.stream_capacity import max_streams_held, simulate_streams
from gpu_ops.errors import InvalidInputError

BUCKETS = (1, 2, 4, 8, 16)


def linear(per_frame_ms: float, fixed_ms: float = 0.0) -> dict[int, float]:
    return {bucket: (fixed_ms + per_frame_ms * bucket) / 1000.0 for bucket in BUCKETS}


def test_fast_worker_adds_little_latency_and_drops_nothing() -> None:
    result = simulate_streams(4, linear(0.5))
    assert result.held
    assert result.dropped_fraction == 0.0
    assert result.p95_latency_ms < 10.0


def test_overloaded_worker_drops_frames_and_is_not_held() -> None:
    result = simulate_streams(8, linear(10.0))  # 80 ms of work per 33 ms frame interval
    assert not result.held
    assert result.dropped_fraction > 0.3


def test_capacity_is_bounded_by_throughput() -> None:
    streams, result = max_streams_held(linear(2.0))  # 500 frames/s at best -> at most 16 streams of 30 fps
    assert result is not None and result.streams == streams
    assert 8 <= streams <= 16
    assert not simulate_streams(streams + 1, linear(2.0)).held


def test_batching_gain_raises_capacity() -> None:
    without_gain, _ = max_streams_held(linear(2.0))
    with_gain, _ = max_streams_held(linear(0.5, fixed_ms=6.0))  # a big fixed cost per call, cheap extra faces
    assert with_gain > without_gain
    assert with_gain >= 16  # needs batches > 1 to get there


def test_hopeless_worker_holds_nothing() -> None:
    assert max_streams_held(linear(40.0)) == (0, None)


def test_missing_bucket_time_is_refused() -> None:
    with pytest.raises(InvalidInputError):
        simulate_streams(2, {1: 0.001})
