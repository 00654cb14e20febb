"""Prometheus text exposition (format 0.0.4), written by hand: counters, gauges and histograms with
labels, safe to update from the worker thread while the event loop renders `/metrics`.

No client library: the format is a few lines of text and the daemon needs only these three kinds.
"""

import math
import threading
from dataclasses import dataclass
from typing import Literal

MetricKind = Literal["counter", "gauge", "histogram"]
LabelValues = tuple[str, ...]

# seconds; covers per-stage timings (1 ms) up to a badly late frame (2.5 s)
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.033,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)

# seconds; the batch deadline is a few ms (serve --batch-wait-ms), so finer than DEFAULT_BUCKETS
BATCH_WAIT_BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.033, 0.1, 0.25)
# seconds since a frame left its decoder: a frame interval (33 ms) apart near the real-time range
FRAME_AGE_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.033, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5
)  # fmt: skip


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _label_text(names: tuple[str, ...], values: LabelValues, extra: str = "") -> str:
    parts = [f'{name}="{_escape_label(value)}"' for name, value in zip(names, values)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


@dataclass
class _HistogramState:
    bucket_counts: list[int]
    total: float = 0.0
    count: int = 0


class Metric:
    """One metric family; values are keyed by the label values in `label_names` order."""

    def __init__(
        self,
        name: str,
        help_text: str,
        kind: MetricKind,
        label_names: tuple[str, ...],
        lock: threading.Lock,
        buckets: tuple[float, ...] = DEFAULT_BUCKETS,
    ) -> None:
        self.name = name
        self.help_text = help_text
        self.kind = kind
        self.label_names = label_names
        self.buckets = tuple(sorted(buckets))
        self._lock = lock
        self._values: dict[LabelValues, float] = {}
        self._histograms: dict[LabelValues, _HistogramState] = {}

    def _key(self, labels: dict[str, str]) -> LabelValues:
        if set(labels) != set(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {tuple(labels)}")
        return tuple(str(labels[name]) for name in self.label_names)

    def inc(self, amount: float = 1.0, /, **labels: str) -> None:
        if self.kind == "histogram" or (self.kind == "counter" and amount < 0):
            raise ValueError(f"{self.name}: inc({amount}) is not allowed on a {self.kind}")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def set(self, value: float, /, **labels: str) -> None:
        if self.kind != "gauge":
            raise ValueError(f"{self.name}: set() is only for gauges")
        key = self._key(labels)
        with self._lock:
            self._values[key] = value

    def observe(self, value: float, /, **labels: str) -> None:
        if self.kind != "histogram":
            raise ValueError(f"{self.name}: observe() is only for histograms")
        key = self._key(labels)
        with self._lock:
            state = self._histograms.get(key)
            if state is None:
                state = self._histograms[key] = _HistogramState([0] * len(self.buckets))
            for index, bound in enumerate(self.buckets):
                if value <= bound:
                    state.bucket_counts[index] += 1
            state.total += value
            state.count += 1

    def remove(self, **labels: str) -> None:
        """Forget one label set (a closed session), so /metrics does not grow without bound."""
        key = self._key(labels)
        with self._lock:
            self._values.pop(key, None)
            self._histograms.pop(key, None)

    def value(self, **labels: str) -> float:
        """Current counter/gauge value (0 when never set); histograms give their observation count."""
        key = self._key(labels)
        with self._lock:
            if self.kind == "histogram":
                state = self._histograms.get(key)
                return float(state.count) if state else 0.0
            return self._values.get(key, 0.0)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help_text}", f"# TYPE {self.name} {self.kind}"]
        with self._lock:
            if self.kind != "histogram":
                for key, value in sorted(self._values.items()):
                    lines.append(f"{self.name}{_label_text(self.label_names, key)} {_format_number(value)}")
                return lines
            for key, state in sorted(self._histograms.items()):
                for bound, cumulative in zip(self.buckets, state.bucket_counts):
                    le = f'le="{_format_number(bound)}"'
                    lines.append(f"{self.name}_bucket{_label_text(self.label_names, key, le)} {cumulative}")
                inf = _label_text(self.label_names, key, 'le="+Inf"')
                lines.append(f"{self.name}_bucket{inf} {state.count}")
                labels = _label_text(self.label_names, key)
                lines.append(f"{self.name}_sum{labels} {_format_number(state.total)}")
                lines.append(f"{self.name}_count{labels} {state.count}")
        return lines


class MetricsRegistry:
    """Owns the metric families of one daemon; `render()` is the `/metrics` body."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._metrics: dict[str, Metric] = {}

    def _add(self, metric: Metric) -> Metric:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} registered twice")
        self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, help_text: str, label_names: tuple[str, ...] = ()) -> Metric:
        return self._add(Metric(name, help_text, "counter", label_names, self._lock))

    def gauge(self, name: str, help_text: str, label_names: tuple[str, ...] = ()) -> Metric:
        return self._add(Metric(name, help_text, "gauge", label_names, self._lock))

    def histogram(
        self,
        name: str,
        help_text: str,
        label_names: tuple[str, ...] = (),
        buckets: tuple[float, ...] = DEFAULT_BUCKETS,
    ) -> Metric:
        return self._add(Metric(name, help_text, "histogram", label_names, self._lock, buckets))

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._metrics.values():
            lines.extend(metric.render())
        return "\n".join(lines) + "\n"


class DaemonMetrics:
    """The daemon's metric families, named once so every module updates the same ones."""

    def __init__(self) -> None:
        self.registry = MetricsRegistry()
        registry = self.registry
        self.active_sessions = registry.gauge("livefuse_active_sessions", "Peer sessions currently open")
        self.frames_in = registry.counter(
            "livefuse_frames_in_total", "Video frames received per session", ("session_id",)
        )
        self.frames_out = registry.counter(
            "livefuse_frames_out_total", "Video frames sent per session", ("session_id",)
        )
        self.frames_dropped = registry.counter(
            "livefuse_frames_dropped_total",
            "Frames dropped (mailbox or batcher overwrite, full queue)",
            ("session_id",),
        )
        self.stage_seconds = registry.histogram(
            "livefuse_stage_seconds", "Time per processing stage (batch = one pipeline call)", ("stage",)
        )
        self.server_latency_seconds = registry.histogram(
            "livefuse_frame_latency_seconds", "Decoded frame in -> frame taken by the encoder"
        )
        self.frame_age_seconds = registry.histogram(
            "livefuse_frame_age_seconds",
            "Age of a frame (since its decoder gave it to the session) as it leaves each stage: mailbox "
            "(the worker took it), batch (its batch started), swap (the pipeline finished), encoder (the "
            "encoder took it); the step between two stages is where it waited",
            ("stage",),
            buckets=FRAME_AGE_BUCKETS,
        )
        self.swap_share = registry.gauge(
            "livefuse_swap_share",
            "Share of each session's frames swapped and sent (1: all; down to 0.25 while the worker cannot "
            "keep up)",
        )
        self.client_latency_seconds = registry.histogram(
            "livefuse_e2e_latency_seconds", "Glass-to-glass latency reported by clients from frame stamps"
        )
        self.batch_size = registry.histogram(
            "livefuse_batch_size", "Frames per pipeline batch", buckets=(1, 2, 4, 8, 16)
        )
        self.batches = registry.counter(
            "livefuse_batches_total",
            "Batches closed by the micro-batcher, by why (full, all_sessions, deadline)",
            ("reason",),
        )
        self.batch_wait_seconds = registry.histogram(
            "livefuse_batch_wait_seconds",
            "Time a frame waited in the micro-batcher for company before its batch closed",
            buckets=BATCH_WAIT_BUCKETS,
        )
        self.batcher_dropped = registry.counter(
            "livefuse_batcher_dropped_total",
            "Frames replaced in the micro-batcher by a newer one before they ran (also in frames_dropped)",
        )
        self.bus_copies = registry.counter(
            "livefuse_bus_copies_total",
            "Frame copies between host and GPU on the device frame path (2 per swapped frame)",
            ("direction",),
        )
        self.bus_bytes = registry.counter(
            "livefuse_bus_bytes_total", "Bytes of those frame copies", ("direction",)
        )
        self.model_info = registry.gauge(
            "livefuse_model_info", "Engine, provider and models in use (value 1)", ("key", "value")
        )

    def forget_session(self, session_id: str) -> None:
        for metric in (self.frames_in, self.frames_out, self.frames_dropped):
            metric.remove(session_id=session_id)
