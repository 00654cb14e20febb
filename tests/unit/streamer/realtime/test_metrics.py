"""The daemon's metric families: names and labels as scrapers know them, per-daemon registries, both
exposition formats, thread-safe updates, and closed sessions forgotten."""

import threading

from streamer.realtime.metrics import DaemonMetrics


def test_families_keep_their_names_and_labels() -> None:
    metrics = DaemonMetrics()
    metrics.frames_in.labels(session_id='b"x').inc(2)
    metrics.active_sessions.set(3)
    metrics.stage_seconds.labels(stage="swap").observe(0.004)
    metrics.model_info.labels(key="engines", value="mesh").set(1)
    body, content_type = metrics.render()
    text = body.decode()
    assert content_type.startswith("text/plain; version=0.0.4")
    assert "# TYPE livefuse_frames_in_total counter" in text
    assert 'livefuse_frames_in_total{session_id="b\\"x"} 2.0\n' in text
    assert "\nlivefuse_active_sessions 3.0\n" in text
    assert 'livefuse_stage_seconds_bucket{le="0.005",stage="swap"} 1.0' in text
    assert 'livefuse_stage_seconds_bucket{le="0.0025",stage="swap"} 0.0' in text
    assert 'livefuse_model_info{key="engines",value="mesh"} 1.0' in text
    assert metrics.sample("livefuse_stage_seconds_count", stage="swap") == 1


def test_openmetrics_when_asked() -> None:
    metrics = DaemonMetrics()
    metrics.batches.labels(reason="full").inc()
    body, content_type = metrics.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert b'livefuse_batches_total{reason="full"} 1.0' in body and body.endswith(b"# EOF\n")


def test_each_daemon_counts_alone() -> None:
    first, second = DaemonMetrics(), DaemonMetrics()
    first.batcher_dropped.inc()
    assert first.sample("livefuse_batcher_dropped_total") == 1
    assert second.sample("livefuse_batcher_dropped_total") == 0


def test_updates_from_threads_are_not_lost() -> None:
    metrics = DaemonMetrics()

    def bump() -> None:
        for _ in range(10000):
            metrics.frames_out.labels(session_id="s").inc()

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert metrics.sample("livefuse_frames_out_total", session_id="s") == 40000


def test_forget_session_removes_its_series() -> None:
    metrics = DaemonMetrics()
    metrics.frames_in.labels(session_id="s1").inc()
    metrics.frames_in.labels(session_id="s2").inc()
    metrics.forget_session("s1")
    metrics.forget_session("never-seen")
    text = metrics.render()[0].decode()
    assert 'session_id="s1"' not in text and 'livefuse_frames_in_total{session_id="s2"} 1.0' in text
