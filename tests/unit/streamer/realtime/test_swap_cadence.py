"""The swap cadence steps down when the worker cannot keep up and back up when it has room, evenly."""

from streamer.realtime.swap_cadence import CadencePolicy, SwapCadence


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.busy = 0.0

    def __call__(self) -> float:
        return self.now


def run_window(
    cadence: SwapCadence, clock: Clock, frames: int, swapped_share: float, busy: float
) -> list[bool]:
    """One second of `frames` frames; the worker swaps `swapped_share` of the admitted ones. A window is
    judged at the first frame of the next one."""
    admitted = []
    owed = 0.0
    for _ in range(frames):
        clock.now += 1.0 / frames
        clock.busy += busy / frames
        taken = cadence.admit()
        admitted.append(taken)
        if taken:
            owed += swapped_share
            if owed >= 1.0 - 1e-9:
                owed -= 1.0
                cadence.swapped()
    return admitted


def make(clock: Clock) -> SwapCadence:
    return SwapCadence(lambda: clock.busy, CadencePolicy(), clock=clock, session_id="test")


def test_an_overloaded_session_swaps_every_second_then_third_frame_evenly() -> None:
    clock = Clock()
    cadence = make(clock)
    for _ in range(3):
        run_window(cadence, clock, 30, swapped_share=0.5, busy=1.0)
    assert cadence.cadence == 2 and "of" in cadence.reason
    admitted = run_window(cadence, clock, 30, swapped_share=0.5, busy=1.0)
    assert admitted[:6] == [True, False, True, False, True, False]  # evenly spaced, not in bursts
    for _ in range(2):
        run_window(cadence, clock, 30, swapped_share=0.5, busy=1.0)
    assert cadence.cadence == 3
    assert cadence.shed > 0 and cadence.describe()["swap_cadence"] == 3


def test_it_never_goes_past_the_policys_limit() -> None:
    clock = Clock()
    cadence = make(clock)
    for _ in range(30):
        run_window(cadence, clock, 30, swapped_share=0.25, busy=1.0)
    assert cadence.cadence == CadencePolicy().max_cadence


def test_room_on_the_worker_brings_every_frame_back() -> None:
    clock = Clock()
    cadence = make(clock)
    for _ in range(3):
        run_window(cadence, clock, 30, swapped_share=0.5, busy=1.0)
    assert cadence.cadence == 2
    for _ in range(3):
        run_window(cadence, clock, 30, swapped_share=1.0, busy=0.3)  # 0.3 * 2 = 0.6 at cadence 1: room
    assert cadence.cadence == 2  # not before `windows_to_raise` roomy windows
    for _ in range(2):
        run_window(cadence, clock, 30, swapped_share=1.0, busy=0.3)
    assert cadence.cadence == 1 and cadence.reason == "swapping every frame"


def test_a_busy_worker_keeps_the_lower_cadence_even_when_every_frame_comes_back() -> None:
    """At cadence 2 with the worker 60 % busy, every frame would mean 120 %: stay."""
    clock = Clock()
    cadence = make(clock)
    for _ in range(3):
        run_window(cadence, clock, 30, swapped_share=0.5, busy=1.0)
    for _ in range(10):
        run_window(cadence, clock, 30, swapped_share=1.0, busy=0.6)
    assert cadence.cadence == 2


def test_reset_starts_over_at_every_frame() -> None:
    clock = Clock()
    cadence = make(clock)
    for _ in range(4):
        run_window(cadence, clock, 30, swapped_share=0.5, busy=1.0)
    cadence.reset()
    assert cadence.cadence == 1 and all(run_window(cadence, clock, 10, swapped_share=1.0, busy=0.1))
