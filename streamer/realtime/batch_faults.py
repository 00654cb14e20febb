"""Faults stay with the session that caused them: how the worker runs a batch so one bad frame costs
only that frame.

A batch (or one of its two phases) runs in chunks of at most the largest bucket; a chunk that raises is
run again one job at a time, so only the failing session's frame passes through untouched. A session
whose frames fail `MAX_LANE_FAILURES` times in a row is reported through `on_lane_failed` (the daemon
ends it). Out of GPU memory halves the batch bucket (the batcher's `BatchPolicy`, so later batches are
closed at the smaller size too) and the chunk runs again in smaller pieces. Called from the worker
thread and its swap stage; the counters it keeps are per lane or only logged.
"""

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from streamer.realtime.micro_batcher import BatchPolicy, MicroBatcher
from streamer.realtime.worker_lane import WorkerLane

logger = logging.getLogger(__name__)

ERROR_LOG_INTERVAL_S = 5.0
MAX_LANE_FAILURES = 15  # consecutive failed frames (half a second at 30 fps) before a session is ended
OUT_OF_MEMORY_MESSAGES = ("failed to allocate memory", "out of memory")

LaneFailed = Callable[[str, str], None]  # (session_id, reason), called on a worker thread


def is_out_of_memory(error: BaseException) -> bool:
    """CuPy's OutOfMemoryError, or ONNX Runtime's "Failed to allocate memory" RuntimeError."""
    if type(error).__name__ == "OutOfMemoryError":
        return True
    message = str(error).lower()
    return any(text in message for text in OUT_OF_MEMORY_MESSAGES)


class BatchFaults:
    """Runs batch steps with the rules above; owns the lanes' failure counting and the error log's pace."""

    def __init__(self, batcher: MicroBatcher[Any], on_lane_failed: LaneFailed | None = None) -> None:
        self._batcher = batcher
        self._on_lane_failed = on_lane_failed
        self._last_error_log = 0.0

    def run(
        self,
        jobs: list[Any],
        lanes: list[WorkerLane],
        run: Callable[[list[Any]], list[Any]],
        *,
        last_phase: bool = True,
    ) -> list[Any | None]:
        """Each job's `run` result (process_batch, or one of its two phases), None where it failed (that
        frame passes through). A lane's failure count restarts only when its frame made it through the
        `last_phase`."""
        outputs: list[Any | None] = [None] * len(jobs)
        size = self._batcher.policy.largest
        chunks = deque(
            list(range(start, min(start + size, len(jobs)))) for start in range(0, len(jobs), size)
        )
        while chunks:
            chunk = chunks.popleft()
            try:
                results = run([jobs[index] for index in chunk])
            except Exception as error:  # noqa: BLE001 - isolate it below; one bad frame must not end the streams
                if is_out_of_memory(error) and self._halve_bucket(len(chunk), error):
                    size = self._batcher.policy.largest
                    pieces = [chunk[start : start + size] for start in range(0, len(chunk), size)]
                    chunks.extendleft(reversed(pieces))
                elif len(chunk) > 1:
                    chunks.extendleft([index] for index in reversed(chunk))
                elif is_out_of_memory(error):
                    self.log_error()  # already at batch 1: pass this frame through, keep going
                else:
                    self.lane_failed(lanes[chunk[0]], error)
                continue
            for index, result in zip(chunk, results):
                outputs[index] = result
                if last_phase:
                    lanes[index].failures = 0
        return outputs

    def lane_failed(self, lane: WorkerLane, error: BaseException) -> None:
        """One more frame of `lane` failed (logged at most every ERROR_LOG_INTERVAL_S)."""
        lane.failures += 1
        self.log_error(lane.session_id)
        if lane.failures == MAX_LANE_FAILURES and self._on_lane_failed is not None:
            reason = f"{lane.failures} frames in a row failed: {type(error).__name__}: {error}"
            self._on_lane_failed(lane.session_id, reason)

    def log_error(self, session_id: str | None = None) -> None:
        now = time.monotonic()
        if now - self._last_error_log >= ERROR_LOG_INTERVAL_S:
            self._last_error_log = now
            logger.exception(
                "session %s: frame failed; passed through",
                session_id or "-",
                extra={"event": "batch_error", "session_id": session_id},
            )

    def _halve_bucket(self, failed_size: int, error: BaseException) -> bool:
        """Shrink the largest bucket to half the one that ran out of memory; False when already 1."""
        policy = self._batcher.policy
        bucket = policy.bucket_for(min(failed_size, policy.largest))
        if bucket <= 1:
            return False
        new_largest = bucket // 2
        buckets = tuple(size for size in policy.buckets if size <= new_largest) or (new_largest,)
        self._batcher.policy = BatchPolicy(buckets=buckets, max_wait_ms=policy.max_wait_ms)
        logger.warning(
            "out of memory in a batch of %d (%s); largest batch is now %d",
            failed_size,
            error,
            new_largest,
            extra={"event": "oom_batch_halved", "batch_size": new_largest},
        )
        return True
