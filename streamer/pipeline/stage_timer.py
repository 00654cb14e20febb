"""Per-stage wall-time samples (detect, landmarks, swap, total ...) kept in bounded windows.

The pipeline records into it on the worker thread; the bench prints it and /metrics exports it.
A bounded deque per stage keeps memory flat however long a call runs.
"""

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

WINDOW = 2048


@dataclass(frozen=True)
class StageSummary:
    stage: str
    count: int
    mean_ms: float
    p50_ms: float
    p95_ms: float


class StageTimer:
    """Thread-safe: written by the worker, read by the event loop."""

    def __init__(self, window: int = WINDOW) -> None:
        self._window = window
        self._samples: dict[str, deque[float]] = {}
        self._totals: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[str, float], None]] = []

    def add_listener(self, listener: Callable[[str, float], None]) -> None:
        """Also hand every sample to `listener(stage, seconds)` (the daemon's stage histogram)."""
        self._listeners.append(listener)

    def record(self, stage: str, seconds: float) -> None:
        for listener in self._listeners:
            listener(stage, seconds)
        with self._lock:
            self._samples.setdefault(stage, deque(maxlen=self._window)).append(seconds)
            count, total = self._totals.get(stage, (0, 0.0))
            self._totals[stage] = (count + 1, total + seconds)

    def totals(self) -> dict[str, tuple[int, float]]:
        """Cumulative (count, seconds) per stage since start, for Prometheus counters."""
        with self._lock:
            return dict(self._totals)

    def summary(self) -> list[StageSummary]:
        with self._lock:
            windows = {stage: np.array(samples) * 1000.0 for stage, samples in self._samples.items()}
        return [
            StageSummary(
                stage,
                len(values),
                float(values.mean()),
                float(np.percentile(values, 50)),
                float(np.percentile(values, 95)),
            )
            for stage, values in windows.items()
            if len(values)
        ]

    def reset(self) -> None:
        with self._lock:
            self._samples.clear()
            self._totals.clear()


class StageClock:
    """Records into `timer` the time since the previous stage, after `sync()` (a device's queued work
    must be done before its stage ends); does nothing without a timer, so untimed runs add no syncs."""

    def __init__(self, timer: StageTimer | None, sync: Callable[[], None]) -> None:
        self.timer, self.sync, self.last = timer, sync, time.perf_counter()

    def __call__(self, name: str) -> None:
        if self.timer is None:
            return
        self.sync()
        now = time.perf_counter()
        self.timer.record(name, now - self.last)
        self.last = now
