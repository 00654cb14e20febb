"""The lossy-network helper's link model on an injected clock: loss at its rate and repeatable, cuts
drop everything inside their window, the bandwidth cap queues then tail-drops, delay and jitter add."""

import random

import pytest

from bench.clients.lossy_network import LinkConditions, LinkDirection, LossyNetwork


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _direction(conditions: LinkConditions, seed: int = 0) -> LinkDirection:
    return LinkDirection(conditions, random.Random(seed))


def test_loss_drops_about_its_share_and_a_seed_repeats_the_run() -> None:
    link = _direction(LinkConditions(loss=0.05))
    fates = [link.fate(1200, 0.0) for _ in range(20_000)]
    dropped = sum(fate is None for fate in fates)
    assert 0.04 < dropped / len(fates) < 0.06
    assert link.counters.lost == dropped and link.counters.passed == len(fates) - dropped
    again = _direction(LinkConditions(loss=0.05))
    assert [again.fate(1200, 0.0) for _ in range(20_000)] == fates


def test_no_conditions_pass_everything_at_once() -> None:
    link = _direction(LinkConditions())
    assert {link.fate(1200, float(t)) for t in range(100)} == {0.0}


def test_a_cut_drops_both_directions_inside_its_window_only() -> None:
    clock = Clock()
    network = LossyNetwork(LinkConditions(), clock=clock)
    start, end = network.schedule_cut(after_s=1.0, duration_s=2.0)
    assert (start, end) == (101.0, 103.0)
    for now, passes in ((100.5, True), (101.0, False), (102.9, False), (103.0, True)):
        for direction in (network.uplink, network.downlink):
            assert (direction.fate(100, now) is not None) == passes, now
    assert network.uplink.counters.cut == network.downlink.counters.cut == 2


def test_the_cap_queues_datagrams_behind_each_other_then_tail_drops() -> None:
    # 500 kbit/s: a 1250-byte datagram takes 20 ms to leave; a 100 ms queue holds five
    link = _direction(LinkConditions(rate_kbps=500, queue_ms=100))
    fates = [link.fate(1250, 0.0) for _ in range(8)]
    assert fates[:5] == pytest.approx([0.02, 0.04, 0.06, 0.08, 0.10])
    assert fates[5:] == [None, None, None]
    assert link.counters.queue_full == 3
    assert link.fate(1250, 0.5) == pytest.approx(0.02)  # the queue has drained by then


def test_a_sender_at_the_cap_gets_its_rate_through() -> None:
    link = _direction(LinkConditions(rate_kbps=500, queue_ms=200))
    for index in range(1000):  # 1 Mbit/s offered for 10 s: 1250 bytes every 10 ms
        link.fate(1250, index * 0.01)
    delivered_kbit = link.counters.bytes_passed * 8 / 1000
    assert delivered_kbit / 10.0 == pytest.approx(500, rel=0.05)
    assert link.counters.queue_full == pytest.approx(500, rel=0.05)


def test_delay_and_jitter_add_to_each_datagram() -> None:
    link = _direction(LinkConditions(delay_ms=40, jitter_ms=10))
    fates = [link.fate(100, 0.0) for _ in range(1000)]
    assert all(fate is not None and 0.040 <= fate < 0.050 for fate in fates)
    assert max(f for f in fates if f is not None) - min(f for f in fates if f is not None) > 0.008


def test_conditions_are_checked() -> None:
    with pytest.raises(ValueError, match="probability"):
        LinkConditions(loss=1.5)
    with pytest.raises(ValueError, match="rate_kbps"):
        LinkConditions(rate_kbps=0)
