"""MicroBatcher: bucket choice, deadline, newest frame wins, fairness across sessions (fake clock)."""

from collections import Counter

import pytest

from gpu_ops.errors import InvalidInputError
from streamer.realtime.micro_batcher import BatchPolicy, MicroBatcher


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance_ms(self, milliseconds: float) -> None:
        self.now += milliseconds / 1000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_batcher(clock: FakeClock, max_wait_ms: float = 5.0) -> MicroBatcher[str]:
    return MicroBatcher(BatchPolicy(max_wait_ms=max_wait_ms), clock=clock)


@pytest.mark.parametrize(
    ("count", "bucket"), [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (8, 8), (9, 16), (16, 16)]
)
def test_bucket_is_the_smallest_that_fits(count: int, bucket: int) -> None:
    assert BatchPolicy().bucket_for(count) == bucket


def test_policy_rejects_bad_buckets() -> None:
    with pytest.raises(InvalidInputError):
        BatchPolicy(buckets=(4, 2))
    with pytest.raises(InvalidInputError):
        BatchPolicy(buckets=())
    with pytest.raises(InvalidInputError):
        BatchPolicy().bucket_for(17)


def test_batch_waits_for_company_until_the_deadline(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_wait_ms=5.0)
    for session in ("a", "b", "c"):
        batcher.attach(session)
    batcher.submit("a", "a0")
    clock.advance_ms(2)
    batcher.submit("b", "b0")
    assert batcher.poll() is None  # c may still come
    assert batcher.seconds_until_due() == pytest.approx(0.003)
    clock.advance_ms(3)  # 5 ms after the FIRST frame, not the last
    batch = batcher.poll()
    assert batch is not None
    assert batch.items == ("a0", "b0")
    assert batch.bucket == 2
    assert batch.reason == "deadline"
    assert batch.waited_s() == pytest.approx([0.005, 0.003])
    assert batcher.poll() is None
    assert batcher.deadline() is None


def test_batch_closes_at_once_when_every_session_has_a_frame(clock: FakeClock) -> None:
    batcher = make_batcher(clock)
    batcher.attach("a")
    batcher.attach("b")
    batcher.submit("a", "a0")
    assert batcher.poll() is None
    batcher.submit("b", "b0")
    batch = batcher.poll()
    assert batch is not None and batch.reason == "all_sessions" and len(batch) == 2


def test_batch_closes_at_the_largest_bucket(clock: FakeClock) -> None:
    batcher = make_batcher(clock)
    for index in range(20):
        batcher.attach(f"s{index}")
    for index in range(16):
        batcher.submit(f"s{index}", f"f{index}")
    batch = batcher.poll()
    assert batch is not None
    assert batch.reason == "full" and len(batch) == 16 and batch.bucket == 16


def test_newest_frame_wins_and_the_replaced_one_is_counted(clock: FakeClock) -> None:
    batcher = make_batcher(clock)
    batcher.attach("a")
    batcher.attach("b")
    batcher.submit("a", "a0")
    clock.advance_ms(1)
    batcher.submit("a", "a1")
    clock.advance_ms(5)
    batch = batcher.poll()
    assert batch is not None
    assert batch.items == ("a1",)  # one frame per session per batch, the newest
    assert batcher.dropped == 1
    assert batch.frames[0].arrived_at == pytest.approx(100.001)


def test_no_session_is_starved_when_more_sessions_wait_than_fit(clock: FakeClock) -> None:
    batcher = make_batcher(clock, max_wait_ms=2.0)
    sessions = [f"s{index}" for index in range(40)]
    served: Counter[str] = Counter()
    longest_wait = 0.0
    for tick in range(30):  # every session sends a frame every tick; 40 > 16 sessions fit a batch
        for session in sessions:
            batcher.submit(session, f"{session}@{tick}")
        while (batch := batcher.poll()) is not None:
            assert len(set(batch.session_ids)) == len(batch)  # at most one frame per session
            served.update(str(session) for session in batch.session_ids)
            longest_wait = max(longest_wait, *batch.waited_s())
        clock.advance_ms(33)
    assert set(served) == set(sessions)
    assert max(served.values()) - min(served.values()) <= 1  # round robin: shares differ by one batch


def test_round_robin_start_moves_past_the_last_served_session(clock: FakeClock) -> None:
    batcher = MicroBatcher[str](BatchPolicy(buckets=(1, 2), max_wait_ms=0.0), clock=clock)
    for session in ("a", "b", "c"):
        batcher.submit(session, session)
    first = batcher.poll()
    assert first is not None and first.session_ids == ("a", "b")
    batcher.submit("a", "a1")
    batcher.submit("b", "b1")
    second = batcher.poll()
    assert second is not None and second.session_ids == ("c", "a")  # c first: it waited longest
    third = batcher.poll()
    assert third is not None and third.session_ids == ("b",)


def test_detach_forgets_the_waiting_frame(clock: FakeClock) -> None:
    batcher = make_batcher(clock)
    batcher.submit("a", "a0")
    batcher.submit("b", "b0")
    batcher.detach("a")
    batcher.detach("a")  # idempotent
    clock.advance_ms(10)
    batch = batcher.poll()
    assert batch is not None and batch.items == ("b0",)
    assert batcher.dropped == 0


def test_flush_hands_out_what_waits(clock: FakeClock) -> None:
    batcher = make_batcher(clock)
    batcher.attach("other")
    assert batcher.flush() is None
    batcher.submit("a", "a0")
    batch = batcher.flush()
    assert batch is not None and batch.reason == "flush" and batch.items == ("a0",)
