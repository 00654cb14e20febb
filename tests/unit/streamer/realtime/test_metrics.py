import threading

import pytest

from streamer.realtime.metrics import DaemonMetrics, MetricsRegistry


def test_counter_and_gauge_render_with_labels() -> None:
    registry = MetricsRegistry()
    frames = registry.counter("frames_total", "Frames", ("session_id",))
    active = registry.gauge("active", "Active sessions")
    frames.inc(session_id="a")
    frames.inc(2, session_id='b"x')
    active.set(3)
    text = registry.render()
    assert "# TYPE frames_total counter" in text
    assert 'frames_total{session_id="a"} 1\n' in text
    assert 'frames_total{session_id="b\\"x"} 2\n' in text
    assert "\nactive 3\n" in text and text.endswith("\n")


def test_histogram_buckets_are_cumulative() -> None:
    registry = MetricsRegistry()
    latency = registry.histogram("latency_seconds", "Latency", buckets=(0.01, 0.1))
    for value in (0.005, 0.05, 0.5):
        latency.observe(value)
    text = registry.render()
    assert 'latency_seconds_bucket{le="0.01"} 1\n' in text
    assert 'latency_seconds_bucket{le="0.1"} 2\n' in text
    assert 'latency_seconds_bucket{le="+Inf"} 3\n' in text
    assert "latency_seconds_count 3\n" in text
    assert "latency_seconds_sum 0.555" in text


def test_misuse_is_rejected() -> None:
    registry = MetricsRegistry()
    counter = registry.counter("c", "C", ("a",))
    with pytest.raises(ValueError):
        counter.inc(-1, a="x")
    with pytest.raises(ValueError):
        counter.inc(b="x")
    with pytest.raises(ValueError):
        counter.set(1, a="x")
    with pytest.raises(ValueError):
        registry.gauge("c", "again")


def test_updates_from_threads_are_not_lost() -> None:
    registry = MetricsRegistry()
    counter = registry.counter("n", "N")

    def bump() -> None:
        for _ in range(10000):
            counter.inc()

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counter.value() == 40000


def test_forget_session_removes_its_series() -> None:
    metrics = DaemonMetrics()
    metrics.frames_in.inc(session_id="s1")
    metrics.frames_in.inc(session_id="s2")
    metrics.forget_session("s1")
    text = metrics.registry.render()
    assert 'session_id="s1"' not in text and 'livefuse_frames_in_total{session_id="s2"} 1' in text
