"""How many concurrent 30 fps streams one worker holds, from measured batch times (virtual-time replay).

Running 32 real streams needs 32 decoders and encoders; the question here is only whether the GPU
worker keeps up. So the bench measures how long one batch of each bucket size takes on the device, and
this module replays N streams arriving at `fps` with random phases through the real `MicroBatcher`
policy on a virtual clock: each closed batch occupies the worker for its measured time. A frame's added
latency is completion minus arrival (waiting for the worker or the batch deadline, plus processing).
N streams are held when the p95 added latency stays under the budget and (almost) no frame is dropped.
"""

import heapq
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpu_ops.errors import InvalidInputError
from streamer.realtime.micro_batcher import BatchPolicy, MicroBatcher

logger = logging.getLogger(__name__)

LATENCY_BUDGET_MS = 33.0
MAX_DROPPED_FRACTION = 0.01
STREAM_LIMIT = 1024


@dataclass(frozen=True)
class CapacityResult:
    """One replay: N streams, the latency they saw, and whether the worker held them."""

    streams: int
    p95_latency_ms: float
    mean_batch_size: float
    dropped_fraction: float
    held: bool


class _VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate_streams(
    streams: int,
    batch_seconds: Mapping[int, float],
    *,
    fps: float = 30.0,
    duration_s: float = 4.0,
    policy: BatchPolicy | None = None,
    latency_budget_ms: float = LATENCY_BUDGET_MS,
    seed: int = 0,
) -> CapacityResult:
    """Replay `streams` streams for `duration_s`; `batch_seconds[bucket]` is one batch's measured time."""
    policy = policy or BatchPolicy()
    missing = [bucket for bucket in policy.buckets if bucket not in batch_seconds]
    if streams < 1 or missing:
        raise InvalidInputError(f"need >= 1 stream and a time for every bucket (missing {missing})")
    clock = _VirtualClock()
    batcher: MicroBatcher[int] = MicroBatcher(policy, clock=clock)
    phases = np.random.default_rng(seed).uniform(0.0, 1.0 / fps, streams)
    arrivals = [(float(phase), stream) for stream, phase in enumerate(phases)]
    heapq.heapify(arrivals)
    for stream in range(streams):
        batcher.attach(stream)
    latencies: list[float] = []
    batch_sizes: list[int] = []
    arrived = 0
    while True:
        while arrivals and arrivals[0][0] <= clock.now:
            arrival, stream = heapq.heappop(arrivals)
            clock.now, now = arrival, clock.now  # the frame is stamped with its own arrival time
            batcher.submit(stream, stream)
            clock.now = now
            arrived += 1
            if arrival + 1.0 / fps < duration_s:
                heapq.heappush(arrivals, (arrival + 1.0 / fps, stream))
        batch = batcher.poll()
        if batch is not None:
            clock.now += batch_seconds[batch.bucket]
            latencies.extend(clock.now - frame.arrived_at for frame in batch.frames)
            batch_sizes.append(len(batch))
            continue
        deadline = batcher.deadline()
        upcoming = [time for time in (deadline, arrivals[0][0] if arrivals else None) if time is not None]
        if not upcoming:
            break
        clock.now = max(clock.now, min(upcoming))
    p95_ms = float(np.percentile(latencies, 95) * 1000.0) if latencies else float("inf")
    dropped_fraction = batcher.dropped / max(1, arrived)
    return CapacityResult(
        streams=streams,
        p95_latency_ms=p95_ms,
        mean_batch_size=float(np.mean(batch_sizes)) if batch_sizes else 0.0,
        dropped_fraction=dropped_fraction,
        held=p95_ms < latency_budget_ms and dropped_fraction <= MAX_DROPPED_FRACTION,
    )


def max_streams_held(
    batch_seconds: Mapping[int, float], *, limit: int = STREAM_LIMIT, **replay_options: object
) -> tuple[int, CapacityResult | None]:
    """The largest N (<= limit) whose replay is held, by doubling then bisection; (0, None) if even 1 fails."""

    def held(count: int) -> CapacityResult | None:
        result = simulate_streams(count, batch_seconds, **replay_options)  # type: ignore[arg-type]
        return result if result.held else None

    best: CapacityResult | None = held(1)
    if best is None:
        return 0, None
    low, high = 1, None
    while high is None:
        candidate = min(low * 2, limit)
        result = held(candidate)
        if result is None:
            high = candidate
        else:
            low, best = candidate, result
            if candidate == limit:
                return low, best
    while high - low > 1:
        middle = (low + high) // 2
        result = held(middle)
        if result is None:
            high = middle
        else:
            low, best = middle, result
    return low, best
