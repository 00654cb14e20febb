"""1080p in degrades by cadence, never by latency: a frame that costs the worker longer than the call's
frame interval makes the swap cadence swap fewer frames, evenly, and every frame it admits is swapped at
once, so its age when it comes back is one swap long, not a queue.

The call is simulated on a virtual clock: a camera sends 30 fps, the session admits frames through the
real `SwapCadence` into the real one-slot `FrameMailbox`, and a worker whose every swap costs a fixed time
(the slow fake engine) takes the newest waiting frame whenever it is idle, as `BatchWorker` does."""

from dataclasses import dataclass, field
from itertools import pairwise

import pytest

from streamer.realtime.mailbox import FrameMailbox
from streamer.realtime.swap_cadence import CadencePolicy, SwapCadence

FPS = 30
SECONDS = 60
SETTLED_S = 30  # judged over the last half, once the cadence has had its windows


@dataclass
class Call:
    """What came back: per swapped frame, its index (camera order) and its age when the swap finished."""

    swap_s: float
    now: float = 0.0
    busy: float = 0.0
    swapped: list[tuple[int, float]] = field(default_factory=list)
    dropped_in_mailbox: list[int] = field(default_factory=list)

    def run(self) -> SwapCadence:
        cadence = SwapCadence(lambda: self.busy, CadencePolicy(), clock=lambda: self.now)
        mailbox: FrameMailbox[tuple[int, float]] = FrameMailbox()
        working: tuple[int, float, float] | None = None  # (index, sent at, done at)
        for index in range(FPS * SECONDS):
            arrival = index / FPS
            while True:  # the worker's steps up to this frame's arrival
                if working is not None and working[2] <= arrival:
                    frame_index, sent_at, done_at = working
                    self.now = done_at
                    self.swapped.append((frame_index, done_at - sent_at))
                    cadence.swapped()
                    working = None
                if working is None:
                    taken = mailbox.take()
                    if taken is not None:
                        start = max(self.now, taken[1])
                        working = (taken[0], taken[1], start + self.swap_s)
                        self.busy += self.swap_s
                        continue
                break
            self.now = arrival
            if cadence.admit("call"):
                if mailbox.put((index, arrival)):  # it replaced an admitted frame the worker never took
                    self.dropped_in_mailbox.append(index)
                if working is None:  # an idle worker takes it at once
                    taken = mailbox.take()
                    assert taken is not None
                    working = (taken[0], taken[1], arrival + self.swap_s)
                    self.busy += self.swap_s
        return cadence

    def settled(self) -> list[tuple[int, float]]:
        return [(index, age) for index, age in self.swapped if index >= FPS * (SECONDS - SETTLED_S)]


@pytest.mark.parametrize("swap_ms", [50, 90, 150, 180])  # 720p today ... 1080p close up today
def test_slow_swaps_lower_the_cadence_evenly_and_keep_the_latency_one_swap_long(swap_ms: int) -> None:
    call = Call(swap_ms / 1000)
    cadence = call.run()
    settled = call.settled()
    assert cadence.share < 1
    assert float(cadence.share) * FPS * call.swap_s <= 0.9  # headroom left for the codecs
    ages = [age for _, age in settled]
    assert max(ages) <= call.swap_s + 1e-9, "a frame waited for the worker: latency, not cadence"
    assert not [index for index in call.dropped_in_mailbox if index >= FPS * (SECONDS - SETTLED_S)]
    gaps = {later - earlier for (earlier, _), (later, _) in pairwise(settled)}
    assert max(gaps) - min(gaps) <= 1, f"swapped frames not evenly spread: gaps {sorted(gaps)}"
    assert len(settled) >= 0.8 * float(cadence.share) * FPS * SETTLED_S  # and the share is what comes back


def test_a_swap_that_fits_the_frame_interval_swaps_every_frame() -> None:
    call = Call(0.02)
    cadence = call.run()
    assert cadence.share == 1
    assert len(call.settled()) == FPS * SETTLED_S - 1  # the last one is still being swapped at the end
