"""Adaptive swap cadence: when the worker cannot swap the sessions' frames as fast as they come, every
session swaps fewer of them (3 of 4, 2 of 3, 1 of 2 ... down to 1 of 6), evenly spread, and sends only
those, instead of letting the mailboxes drop frames at random behind a saturated worker. One share for
all sessions of a worker, so each call gets the same share of its frames swapped (fairness). The video resolution
stays; the frame rate goes down evenly; the worker keeps some headroom, so an admitted frame waits for
nothing but its own batch, and the codecs keep their share of a small machine. A session that has a
source never sends an unswapped frame: the skipped frames are not sent at all ("shed").

One `SwapCadence` per worker (`BatchWorker.cadence`), fed on the event loop: `admit(session_id)` per
frame the worker would swap, `swapped()` per frame it swapped and handed back, `forget(session_id)` when
a session leaves. Each window (1 s) it compares what came back with what
it admitted, and looks at how busy the worker was:
- fewer than `lower_below` of the admitted frames came back, or fewer than the next step down would
  admit (at 3/4, 83 % back is 62 % of the frames, unevenly: 2/3 gives more, evenly), or the worker was
  busy more than `lower_above_busy` of the time, for `windows_to_lower` windows: swap fewer frames; as
  few as the worker would manage busy all the time (share x what came back / how busy it was, with a
  margin: a worker 84 % busy that swapped 48 % of the frames manages 57 %), at least one step down;
- at least `raise_above_returned` of them came back (the mailbox's newest-wins drops aside) for
  `windows_to_raise` windows and the worker, busy `b`, would be busy
  `b x higher share / share` under `raise_below_busy`: up to the highest such share (a call that
  joined at a low share climbs back in one move, not one step per `windows_to_raise`), but never past
  the share it last fell from (that share failed, whatever the projection from a lightly loaded low
  share says), and from `one_step_from` up only to the next share. Projecting the
  load keeps the cadence from flapping between two steps; where the projection was wrong (a raise
  undone within `failed_raise_windows`), the next raise waits twice as many windows, up to
  `max_windows_to_raise`. Two windows are enough otherwise: the first share after a load spike (three
  calls starting at once, at full working size before the strain halves the swap's cost,
  streamer/transport/encoder_effort.py) is far below what the worker then manages.
A window in which the worker spent more than `stalled_above` of its time on other calls than frames
(a source being prepared, a stream set up: `stalled_seconds`) is not judged: what it swapped says
nothing about the frame load, and three calls joining at once would otherwise send the share to the
bottom of the ladder.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

logger = logging.getLogger(__name__)

# the shares of frames a session may swap, most first; 1/6 of 30 fps is 5 frames/s. The last steps are
# for 1080p on a small CPU: a swap of up to 180 ms still leaves the worker 10 % headroom at 1/6, so an
# admitted frame never waits behind another (tests/unit/streamer/realtime/test_cadence_under_slow_swaps.py)
SHARES: tuple[Fraction, ...] = tuple(
    Fraction(n, d) for n, d in ((1, 1), (3, 4), (2, 3), (1, 2), (2, 5), (1, 3), (1, 4), (1, 5), (1, 6))
)


@dataclass(frozen=True)
class CadencePolicy:
    window_s: float = 1.0
    # swapped / admitted in a window below which a share is short, whatever the next share gives: at
    # 2/3 the next share's 3/4 (1/2 of the frames) rules, so 2/3 holds while it brings back more than
    # 1/2 would (20 frames/s x 0.75 = 15); the mailboxes' drops near a worker's limit put a window's
    # return at 0.75-0.85 there (with 0.8 two such windows in a row sent three 480p calls to 1/2)
    lower_below: float = 0.7
    lower_above_busy: float = 0.9  # worker busy fraction in a window: saturated, frames wait for it
    windows_to_lower: int = 2
    raise_below_busy: float = 0.8  # projected worker busy fraction at the higher share
    # from this share up a raise is one step: the linear projection underrates what more frames cost a
    # machine whose cores the codecs share (three 480p calls on 2 cores, 45-53 % busy at 1/2: projected
    # 68-80 % at 3/4, where the worker was 76-85 % busy and lost a fifth of the frames, and the step
    # down went past 2/3 to 1/2; seven raises of seven in four bench runs' logs)
    one_step_from: Fraction = Fraction(1, 2)
    raise_above_returned: float = 0.9  # swapped / admitted in a window that counts as roomy
    windows_to_raise: int = 2
    failed_raise_windows: int = 6  # a lowering this soon after a raise undoes it: back off
    max_windows_to_raise: int = 16
    margin: float = 0.9  # a new share is this much below what the worker managed
    stalled_above: float = 0.05  # worker time on calls other than frames, in a window: not judged


class SwapCadence:
    """Which of the sessions' frames to swap; event loop only. `busy_seconds()` is the worker's total busy time so far
    (monotonic, read from any thread), `stalled_seconds()` its total time on other calls than frames;
    `on_share(share)` hears every change of share (the daemon's encoders work less while it sheds
    frames); `clock` is injectable for tests."""

    def __init__(
        self,
        busy_seconds: Callable[[], float],
        policy: CadencePolicy | None = None,
        *,
        stalled_seconds: Callable[[], float] = lambda: 0.0,
        clock: Callable[[], float] = time.monotonic,
        on_share: Callable[[Fraction], None] | None = None,
    ) -> None:
        self.policy = policy or CadencePolicy()
        self._busy_seconds = busy_seconds
        self._stalled_seconds = stalled_seconds
        self._clock = clock
        self._on_share = on_share
        self.share = SHARES[0]
        self.reason = "swapping every frame"
        self.worker_busy: float | None = None  # the worker's busy share in the last judged window
        self._credit: dict[str, Fraction] = {}  # per session: spreads its admitted frames evenly...
        self._sessions: list[str] = []  # ...from its own phase (sessions in order of arrival)
        self._window_start = clock()
        self._busy_at_start = busy_seconds()
        self._stalled_at_start = stalled_seconds()
        self._admitted = 0
        self._swapped = 0
        self._short_windows = 0
        self._roomy_windows = 0
        self._worst_ratio = 1.0
        self._worst_capacity = 1.0  # what came back over how busy the worker was, in the short windows
        self._windows_to_raise = self.policy.windows_to_raise  # doubled after each raise undone
        self._windows_since_raise: int | None = None  # None: the last change was not a raise
        self._fell_from: Fraction | None = None  # the share of the last lowering, until reached again

    def admit(self, session_id: str) -> bool:
        """Whether this frame of `session_id` goes to the worker; False: skip it (the caller counts it)."""
        self._roll_window()
        credit = self._credit.get(session_id)
        credit = (self._phase(session_id) if credit is None else credit) + self.share
        admitted = credit >= 1
        self._credit[session_id] = credit - 1 if admitted else credit
        self._admitted += admitted
        return admitted

    def swapped(self) -> None:
        self._swapped += 1

    def forget(self, session_id: str) -> None:
        self._credit.pop(session_id, None)
        if session_id in self._sessions:
            self._sessions.remove(session_id)

    def _phase(self, session_id: str) -> Fraction:
        """Where a session's credit starts: k/n for the k-th of n sessions, so calls whose frames come in
        step (from one machine, from one SFU) take turns instead of arriving together: at 2/3 three of
        them bring the worker 2, 2, 2 frames per frame time rather than 3, 3, 0, and a frame waiting
        behind a burst is not replaced in its mailbox by the next (shares change early in a call, and
        each change clears the credits, so all sessions soon have their k/n)."""
        if session_id not in self._sessions:
            self._sessions.append(session_id)
        return Fraction(self._sessions.index(session_id), len(self._sessions))

    def describe(self) -> dict[str, object]:
        return {
            "swap_share": f"{self.share.numerator}/{self.share.denominator}",
            "reason": self.reason,
            "worker_busy": None if self.worker_busy is None else round(self.worker_busy, 2),
        }

    def _roll_window(self) -> None:
        now = self._clock()
        elapsed = now - self._window_start
        if elapsed < self.policy.window_s:
            return
        busy_now, stalled_now = self._busy_seconds(), self._stalled_seconds()
        busy = (busy_now - self._busy_at_start) / elapsed
        stalled = (stalled_now - self._stalled_at_start) / elapsed
        admitted, swapped = self._admitted, self._swapped
        self._window_start, self._busy_at_start, self._admitted, self._swapped = now, busy_now, 0, 0
        self._stalled_at_start = stalled_now
        if admitted == 0 or stalled > self.policy.stalled_above:
            return
        self.worker_busy = min(1.0, busy)
        ratio = min(1.0, swapped / admitted)
        policy = self.policy
        step = SHARES.index(self.share)
        # the next step down would bring back more frames than come back now, and evenly
        below = float(SHARES[step + 1] / self.share) if step + 1 < len(SHARES) else 0.0
        short = ratio < max(policy.lower_below, below) or busy > policy.lower_above_busy
        self._short_windows = self._short_windows + 1 if short else 0
        self._worst_ratio = min(self._worst_ratio, ratio) if short else 1.0
        capacity = ratio / max(busy, ratio, 1e-3)  # at most 1
        self._worst_capacity = min(self._worst_capacity, capacity) if short else 1.0
        fitting = [
            share for share in SHARES[:step] if busy * float(share / self.share) < policy.raise_below_busy
        ]
        if self._fell_from is not None:
            # 2/3 fell to 2/5 on a loaded second, 2/5 idled at 32 % busy and projected 3/4 at 60 %: the
            # jump was undone within a second and the step down went to 1/2 (a three-call bench log)
            fitting = [share for share in fitting if share <= self._fell_from]
        if self.share >= policy.one_step_from:
            fitting = fitting[-1:]  # only the next step up, if it fits
        up = fitting[0] if fitting else None
        roomy = up is not None and ratio >= policy.raise_above_returned
        self._roomy_windows = self._roomy_windows + 1 if roomy else 0
        if self._windows_since_raise is not None:
            self._windows_since_raise += 1
        if self._short_windows >= policy.windows_to_lower and step + 1 < len(SHARES):
            undone = self._windows_since_raise is not None and (
                self._windows_since_raise <= policy.failed_raise_windows
            )
            self._windows_to_raise = (
                min(2 * self._windows_to_raise, policy.max_windows_to_raise)
                if undone
                else policy.windows_to_raise
            )
            self._windows_since_raise = None
            self._fell_from = self.share
            managed = float(self.share) * self._worst_capacity * policy.margin
            lower = next((share for share in SHARES[step + 1 :] if share <= managed), SHARES[-1])
            self._set(
                max(lower, SHARES[step + 1]) if self._worst_ratio >= policy.lower_below else lower,
                f"load: {swapped} of {admitted} frames swapped in {elapsed:.1f} s, worker {busy:.0%} busy",
            )
        elif self._roomy_windows >= self._windows_to_raise and up is not None:
            self._windows_since_raise = 0
            if self._fell_from is not None and up >= self._fell_from:
                self._fell_from = None
            self._set(
                up,
                f"raised: {swapped} of {admitted} frames swapped in {elapsed:.1f} s, worker {busy:.0%} busy",
            )

    def _set(self, share: Fraction, reason: str) -> None:
        self._short_windows = self._roomy_windows = 0
        self._worst_ratio = self._worst_capacity = 1.0
        if share == self.share:
            return
        logger.info(
            "swapping %d of %d frames of every session (%s)",
            share.numerator,
            share.denominator,
            reason,
            extra={"event": "swap_cadence", "swap_share": float(share)},
        )
        self.share = share
        self._credit.clear()
        self.reason = reason if share < 1 else "swapping every frame"
        if self._on_share is not None:
            self._on_share(share)
