"""The worker's second thread: the swap half of each batch, while the worker thread already tracks the next.

On a CPU with two or more cores one thread leaves a core idle half the time: detection and landmarks
(ONNX Runtime) and the swap (OpenCV, NumPy) both release the GIL, yet ran one after the other. With this
stage the worker thread converts and tracks batch k+1 while the stage swaps, converts back and delivers
batch k. The hand-off is a rendezvous, not a queue: the worker hands a batch over only once the stage
is idle, so at most two batches are in flight and no frame waits behind a backlog (DESIGN.md section 2:
latency never grows with time). `ready_in` lets the worker start tracking late enough that its batch is
ready about when the stage frees, so what it takes from the mailboxes is as new as it can be.

A job that raises is a bug, not a bad frame (the worker catches those): the stage keeps it in `error`
and stops, and the next `hand` raises it on the worker thread, which then ends like any crashed worker.
"""

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

logger = logging.getLogger(__name__)

Job = Callable[[], object]  # what it returns is ignored
SMOOTHING = 0.2  # weight of the newest duration in the running estimates
FEED_MARGIN = (
    1.25  # start making the next job this much earlier than its estimate says: the stage never waits
)


class StageStopped(RuntimeError):
    """The stage is closed, or died of `error`; nothing more can be handed to it."""


class SwapStage:
    """One thread running one job at a time; `hand` blocks until it is idle. `busy_seconds()` is its
    total time in jobs. `activate` is entered once by the thread around all its work (the worker's
    conversion context)."""

    def __init__(
        self, activate: Callable[[], AbstractContextManager[object]], name: str = "livefuse-swap"
    ) -> None:
        self._activate = activate
        self._name = name
        self._condition = threading.Condition()
        self._job: Job | None = None
        self._running_since: float | None = None  # perf_counter when the current job began
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._busy_s = 0.0
        self.duration_s: float | None = None  # running estimate of one job's duration
        self.feed_s: float | None = None  # running estimate of the time the feeding thread takes per job
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def busy_seconds(self) -> float:
        return self._busy_s

    def hand(self, job: Job) -> None:
        """Give `job` to the stage once it is idle; returns as soon as it is given (the stage starts it
        at once)."""
        with self._condition:
            while self._job is not None or self._running_since is not None:
                self._raise_if_stopped()
                self._condition.wait()
            self._raise_if_stopped()
            self._job = job
            self._condition.notify_all()

    def fed(self, seconds: float) -> None:
        """The feeding thread took `seconds` to make the job it is about to hand (its estimate)."""
        self.feed_s = _smoothed(self.feed_s, seconds)

    def feed_due_in(self) -> float:
        """Seconds until the feeding thread should start making the next job so that it is ready about
        when the stage frees (<= 0: now)."""
        if self.feed_s is None:
            return 0.0
        return self.ready_in() - self.feed_s * FEED_MARGIN

    def ready_in(self) -> float:
        """Seconds until the stage is expected to be idle (0 when it is, or has no estimate yet)."""
        with self._condition:
            since, duration = self._running_since, self.duration_s
            if self._job is not None:
                return duration or 0.0
        if since is None or duration is None:
            return 0.0
        return max(0.0, since + duration - time.perf_counter())

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Block until no job runs or waits (True), the stage stopped, or the timeout passed (False)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._condition:
            while (self._job is not None or self._running_since is not None) and not self._stopped():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._condition.wait(remaining)
            return True

    def close(self) -> None:
        """Finish the job that runs, drop one still waiting, and join the thread; idempotent."""
        with self._condition:
            self._stopping = True
            self._job = None
            self._condition.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _stopped(self) -> bool:
        return self._stopping or self.error is not None

    def _raise_if_stopped(self) -> None:
        if self.error is not None:
            raise StageStopped(f"the swap stage died: {type(self.error).__name__}: {self.error}")
        if self._stopping:
            raise StageStopped("the swap stage is closed")

    def _run(self) -> None:
        with self._activate():
            while True:
                with self._condition:
                    while self._job is None and not self._stopping:
                        self._condition.wait()
                    job = self._job
                    if self._stopping or job is None:
                        return
                    self._job = None
                    started = self._running_since = time.perf_counter()
                try:
                    job()
                except BaseException as error:  # a bug: the worker thread re-raises it at the next hand
                    logger.exception("swap stage crashed")
                    with self._condition:
                        self.error = error
                        self._running_since = None
                        self._condition.notify_all()
                    return
                elapsed = time.perf_counter() - started
                with self._condition:
                    self._busy_s += elapsed
                    self.duration_s = _smoothed(self.duration_s, elapsed)
                    self._running_since = None
                    self._condition.notify_all()


def _smoothed(estimate: float | None, sample: float) -> float:
    return sample if estimate is None else estimate + SMOOTHING * (sample - estimate)
