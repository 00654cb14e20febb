"""When the GPU worker closes a batch, and which sessions' frames go into it (pure, clock-injected).

Models run best on a few fixed batch shapes (1/2/4/8/16: one CUDA graph or TensorRT profile each), and a
frame that waits for company adds latency. The policy: a batch closes as soon as it fills the largest
bucket, as soon as every attached session has a frame waiting (nobody else can arrive), or `max_wait_ms`
after its first frame arrived, whichever comes first. It holds at most one frame per session (a newer
frame replaces the waiting one: the newest frame wins, the replaced one is counted as dropped). When more
sessions wait than fit, the batch starts at a round-robin cursor, so no session is starved: every waiting
session is served within ceil(sessions / largest bucket) batches.

No threads are started and no clock is read except through `clock`, so tests drive it step by step.
The worker thread submits and polls; sessions attach and detach from the event loop: one lock guards
the state.
"""

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from gpu_ops.errors import InvalidInputError

logger = logging.getLogger(__name__)

Item = TypeVar("Item")
SessionId = Hashable
CloseReason = Literal["full", "all_sessions", "deadline", "flush"]

BATCH_BUCKETS: tuple[int, ...] = (1, 2, 4, 8, 16)
DEFAULT_MAX_WAIT_MS = 4.0


@dataclass(frozen=True)
class BatchPolicy:
    """Bucket sizes the models are prepared for, and how long the first frame may wait for company."""

    buckets: tuple[int, ...] = BATCH_BUCKETS
    max_wait_ms: float = DEFAULT_MAX_WAIT_MS

    def __post_init__(self) -> None:
        if not self.buckets or any(size < 1 for size in self.buckets):
            raise InvalidInputError(f"batch buckets must be positive sizes, got {self.buckets}")
        if tuple(sorted(set(self.buckets))) != self.buckets:
            raise InvalidInputError(f"batch buckets must be strictly increasing, got {self.buckets}")
        if self.max_wait_ms < 0:
            raise InvalidInputError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}")

    @property
    def largest(self) -> int:
        return self.buckets[-1]

    def bucket_for(self, count: int) -> int:
        """The smallest bucket holding `count` frames (the batch is padded up to it)."""
        if count < 1 or count > self.largest:
            raise InvalidInputError(f"{count} frames do not fit the buckets {self.buckets}")
        return next(size for size in self.buckets if size >= count)


# A CPU pipeline's policy: every frame its own batch. On the CPU a batch runs its frames one after another
# anyway (three streams batched: 13.3 / 13.0 ms a frame, one call each: 13.0 / 12.2, `bench --streams 3`),
# so company saves nothing and each frame would wait for the others' swaps (three 640x480 calls at the
# same share: p50 60-75 ms alone against 74-98 ms batched)
ONE_FRAME_A_BATCH = BatchPolicy(buckets=(1,), max_wait_ms=0.0)


@dataclass(frozen=True)
class PendingFrame(Generic[Item]):
    """One session's waiting frame and when (clock seconds) it arrived."""

    session_id: SessionId
    item: Item
    arrived_at: float


@dataclass(frozen=True)
class Batch(Generic[Item]):
    """Frames to run together (one per session, in serving order), and the bucket they are padded to."""

    frames: tuple[PendingFrame[Item], ...]
    bucket: int
    closed_at: float
    reason: CloseReason

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def session_ids(self) -> tuple[SessionId, ...]:
        return tuple(frame.session_id for frame in self.frames)

    @property
    def items(self) -> tuple[Item, ...]:
        return tuple(frame.item for frame in self.frames)

    def waited_s(self) -> list[float]:
        """How long each frame waited in the batcher before its batch closed."""
        return [self.closed_at - frame.arrived_at for frame in self.frames]


class MicroBatcher(Generic[Item]):
    """Collects the newest frame of each session and hands out batches by the policy above."""

    def __init__(
        self, policy: BatchPolicy | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy = policy or BatchPolicy()
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: list[SessionId] = []  # attach order = round-robin ring order
        self._pending: dict[SessionId, PendingFrame[Item]] = {}
        self._cursor = 0  # ring position the next batch starts at
        self.dropped = 0  # frames replaced by a newer frame of the same session before being served

    def attach(self, session_id: SessionId) -> None:
        """Make a session known (submit attaches implicitly); idempotent."""
        with self._lock:
            if session_id not in self._sessions:
                self._sessions.append(session_id)

    def detach(self, session_id: SessionId) -> None:
        """Forget a session and its waiting frame (it is not counted as dropped)."""
        with self._lock:
            if session_id not in self._sessions:
                return
            position = self._sessions.index(session_id)
            self._sessions.pop(position)
            self._pending.pop(session_id, None)
            if position < self._cursor:
                self._cursor -= 1
            if self._cursor >= len(self._sessions):
                self._cursor = 0

    def submit(self, session_id: SessionId, item: Item) -> None:
        """Queue a session's newest frame, replacing (and counting) one that is still waiting."""
        now = self._clock()
        with self._lock:
            if session_id not in self._sessions:
                self._sessions.append(session_id)
            if self._pending.pop(session_id, None) is not None:
                self.dropped += 1
            self._pending[session_id] = PendingFrame(session_id, item, now)  # dict order = arrival order

    @property
    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending)

    def deadline(self) -> float | None:
        """Clock time at which the waiting frames must be served (None when nothing waits)."""
        with self._lock:
            return self._deadline_locked()

    def seconds_until_due(self) -> float | None:
        """How long the worker may sleep before polling again (0 when a batch is due now)."""
        with self._lock:
            if self._close_reason_locked(self._clock()) is not None:
                return 0.0
            deadline = self._deadline_locked()
        return None if deadline is None else max(0.0, deadline - self._clock())

    def poll(self) -> Batch[Item] | None:
        """A batch when the policy says one is due now, else None."""
        with self._lock:
            now = self._clock()
            reason = self._close_reason_locked(now)
            return None if reason is None else self._take_locked(now, reason)

    def flush(self) -> Batch[Item] | None:
        """A batch of whatever waits now, due or not (shutdown, tests)."""
        with self._lock:
            return self._take_locked(self._clock(), "flush") if self._pending else None

    def _deadline_locked(self) -> float | None:
        if not self._pending:
            return None
        first = next(iter(self._pending.values()))  # the oldest waiting frame
        return first.arrived_at + self.policy.max_wait_ms / 1000.0

    def _close_reason_locked(self, now: float) -> CloseReason | None:
        if not self._pending:
            return None
        if len(self._pending) >= self.policy.largest:
            return "full"
        if len(self._pending) == len(self._sessions):
            return "all_sessions"
        deadline = self._deadline_locked()
        if deadline is not None and now >= deadline:
            return "deadline"
        return None

    def _take_locked(self, now: float, reason: CloseReason) -> Batch[Item]:
        ring = self._sessions
        start = self._cursor % len(ring)
        order = ring[start:] + ring[:start]
        chosen: list[PendingFrame[Item]] = []
        last_position = start
        for offset, session_id in enumerate(order):
            if len(chosen) == self.policy.largest:
                break
            frame = self._pending.pop(session_id, None)
            if frame is not None:
                chosen.append(frame)
                last_position = (start + offset) % len(ring)
        self._cursor = (last_position + 1) % len(ring)
        batch = Batch(tuple(chosen), self.policy.bucket_for(len(chosen)), now, reason)
        logger.debug("batch of %d (bucket %d) closed: %s", len(chosen), batch.bucket, reason)
        return batch
