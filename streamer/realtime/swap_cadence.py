"""Adaptive swap cadence: when the worker cannot swap a session's frames as fast as they come, that session
swaps fewer of them (3 of 4, 2 of 3, 1 of 2 ... down to 1 of 4), evenly spread, and sends only those,
instead of letting the mailbox drop frames at random behind a saturated worker. The video resolution
stays; the frame rate goes down evenly; the worker keeps some headroom, so an admitted frame waits for
nothing but its own batch, and the codecs keep their share of a small machine. A session that has a
source never sends an unswapped frame: the skipped frames are not sent at all ("shed").

One `SwapCadence` per session, fed on the event loop: `admit()` per frame the worker would swap,
`swapped()` per frame it swapped and handed back. Each window (1 s) it compares what came back with what
it admitted, and looks at how busy the worker was:
- fewer than `lower_below` of the admitted frames came back, or the worker was busy more than
  `lower_above_busy` of the time, for `windows_to_lower` windows: swap fewer frames; as few as the
  worker managed (share x what came back, with a margin), at least one step down the ladder;
- all of them came back for `windows_to_raise` windows and the worker, busy `b`, would be busy
  `b x next share / share` one step up, under `raise_below_busy`: one step up. Projecting the load keeps
  the cadence from flapping between two steps.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

logger = logging.getLogger(__name__)

# the shares of frames a session may swap, most first; 1/4 of 30 fps is 7.5 frames/s
SHARES: tuple[Fraction, ...] = tuple(
    Fraction(n, d) for n, d in ((1, 1), (3, 4), (2, 3), (1, 2), (2, 5), (1, 3), (1, 4))
)


@dataclass(frozen=True)
class CadencePolicy:
    window_s: float = 1.0
    lower_below: float = 0.8  # swapped / admitted in a window
    lower_above_busy: float = 0.9  # worker busy fraction in a window: saturated, frames wait for it
    windows_to_lower: int = 2
    raise_below_busy: float = 0.8  # projected worker busy fraction one step up
    windows_to_raise: int = 4
    margin: float = 0.9  # a new share is this much below what the worker managed


class SwapCadence:
    """Which of a session's frames to swap. `busy_seconds()` is the worker's total busy time so far
    (monotonic, read from any thread); `clock` is injectable for tests."""

    def __init__(
        self,
        busy_seconds: Callable[[], float],
        policy: CadencePolicy | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        session_id: str = "-",
    ) -> None:
        self.policy = policy or CadencePolicy()
        self._busy_seconds = busy_seconds
        self._clock = clock
        self._session_id = session_id
        self.share = SHARES[0]
        self.reason = "swapping every frame"
        self.shed = 0  # frames not swapped (and not sent) because of the cadence
        self._credit = Fraction(0)
        self._window_start = clock()
        self._busy_at_start = busy_seconds()
        self._admitted = 0
        self._swapped = 0
        self._short_windows = 0
        self._roomy_windows = 0
        self._worst_ratio = 1.0

    def admit(self) -> bool:
        """Whether this frame goes to the worker; False: skip it (counted in `shed`)."""
        self._roll_window()
        self._credit += self.share
        if self._credit < 1:
            self.shed += 1
            return False
        self._credit -= 1
        self._admitted += 1
        return True

    def swapped(self) -> None:
        self._swapped += 1

    def reset(self) -> None:
        """Back to every frame (a new source): a fresh start."""
        self._set(SHARES[0], "swapping every frame")

    def describe(self) -> dict[str, object]:
        return {
            "swap_share": f"{self.share.numerator}/{self.share.denominator}",
            "frames_shed": self.shed,
            "reason": self.reason,
        }

    def _roll_window(self) -> None:
        now = self._clock()
        elapsed = now - self._window_start
        if elapsed < self.policy.window_s:
            return
        busy_now = self._busy_seconds()
        busy = (busy_now - self._busy_at_start) / elapsed
        admitted, swapped = self._admitted, self._swapped
        self._window_start, self._busy_at_start, self._admitted, self._swapped = now, busy_now, 0, 0
        if admitted == 0:
            return
        ratio = min(1.0, swapped / admitted)
        policy = self.policy
        short = ratio < policy.lower_below or busy > policy.lower_above_busy
        self._short_windows = self._short_windows + 1 if short else 0
        self._worst_ratio = min(self._worst_ratio, ratio) if short else 1.0
        step = SHARES.index(self.share)
        up = SHARES[step - 1] if step > 0 else None
        roomy = up is not None and ratio >= 0.95 and busy * float(up / self.share) < policy.raise_below_busy
        self._roomy_windows = self._roomy_windows + 1 if roomy else 0
        if self._short_windows >= policy.windows_to_lower and step + 1 < len(SHARES):
            managed = float(self.share) * self._worst_ratio * policy.margin
            lower = next((share for share in SHARES[step + 1 :] if share <= managed), SHARES[-1])
            self._set(
                max(lower, SHARES[step + 1]) if self._worst_ratio >= policy.lower_below else lower,
                f"load: {swapped} of {admitted} frames swapped in {elapsed:.1f} s, worker {busy:.0%} busy",
            )
        elif self._roomy_windows >= policy.windows_to_raise and up is not None:
            self._set(up, f"headroom: worker {busy:.0%} busy")

    def _set(self, share: Fraction, reason: str) -> None:
        self._short_windows = self._roomy_windows = 0
        self._worst_ratio = 1.0
        if share == self.share:
            return
        logger.info(
            "session %s: swapping %d of %d frames (%s)",
            self._session_id,
            share.numerator,
            share.denominator,
            reason,
            extra={"session_id": self._session_id, "event": "swap_cadence", "swap_share": float(share)},
        )
        self.share = share
        self._credit = Fraction(0)
        self.reason = reason if share < 1 else "swapping every frame"
