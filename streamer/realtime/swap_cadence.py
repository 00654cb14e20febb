"""Adaptive swap cadence: when the worker cannot swap a session's frames as fast as they come, that session
swaps every 2nd (then 3rd, 4th) frame and sends only those, instead of letting the mailbox drop frames at
random. The video resolution stays; the frame rate goes down evenly; the worker gets back the headroom the
codecs need on a small machine, so a swapped frame waits for nothing but its own batch. Never sends an
unswapped frame of a session that has a source: the skipped frames are not sent at all ("shed").

One `SwapCadence` per session, fed on the event loop: `admit()` per frame the worker would swap,
`swapped()` per frame it swapped and handed back. Each window (1 s) it compares what came back with what
it admitted and looks at how busy the worker was:
- fewer than `lower_below` of the admitted frames came back for `windows_to_lower` windows: swap fewer
  frames (cadence + 1, up to `max_cadence`);
- all of them came back for `windows_to_raise` windows and the worker, busy `b` of the time, would be
  busy `b * cadence / (cadence - 1)` at the next-lower cadence, under `raise_below_busy`: swap more
  (cadence - 1). Projecting the load keeps the cadence from flapping between two steps.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CadencePolicy:
    window_s: float = 1.0
    max_cadence: int = 4  # 30 fps in: at worst 7.5 swapped frames/s per session
    lower_below: float = 0.8  # swapped / admitted in a window
    windows_to_lower: int = 2
    raise_below_busy: float = 0.8  # projected worker busy fraction at the next-lower cadence
    windows_to_raise: int = 4


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
        self.cadence = 1
        self.reason = "swapping every frame"
        self.shed = 0  # frames not swapped (and not sent) because of the cadence
        self._frame = 0
        self._window_start = clock()
        self._busy_at_start = busy_seconds()
        self._admitted = 0
        self._swapped = 0
        self._short_windows = 0
        self._idle_windows = 0

    def admit(self) -> bool:
        """Whether this frame goes to the worker; False: skip it (counted in `shed`)."""
        self._roll_window()
        self._frame += 1
        if (self._frame - 1) % self.cadence:
            self.shed += 1
            return False
        self._admitted += 1
        return True

    def swapped(self) -> None:
        self._swapped += 1

    def reset(self) -> None:
        """Back to every frame (a new source, swap switched off and on: a fresh start)."""
        self._set(1, "swapping every frame")
        self._short_windows = self._idle_windows = 0

    def describe(self) -> dict[str, object]:
        return {"swap_cadence": self.cadence, "frames_shed": self.shed, "reason": self.reason}

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
        ratio = swapped / admitted
        policy = self.policy
        self._short_windows = self._short_windows + 1 if ratio < policy.lower_below else 0
        projected = busy * self.cadence / (self.cadence - 1) if self.cadence > 1 else busy
        roomy = ratio >= 0.95 and projected < policy.raise_below_busy
        self._idle_windows = self._idle_windows + 1 if roomy else 0
        if self._short_windows >= policy.windows_to_lower and self.cadence < policy.max_cadence:
            self._set(
                self.cadence + 1,
                f"load: {swapped} of {admitted} frames swapped in {elapsed:.1f} s, worker {busy:.0%} busy",
            )
        elif self._idle_windows >= policy.windows_to_raise and self.cadence > 1:
            self._set(self.cadence - 1, f"headroom: worker {busy:.0%} busy")

    def _set(self, cadence: int, reason: str) -> None:
        self._short_windows = self._idle_windows = 0
        if cadence == self.cadence:
            return
        logger.info(
            "session %s: swapping every %s frame (%s)",
            self._session_id,
            _ordinal(cadence),
            reason,
            extra={"session_id": self._session_id, "event": "swap_cadence", "swap_cadence": cadence},
        )
        self.cadence = cadence
        self.reason = reason if cadence > 1 else "swapping every frame"


def _ordinal(cadence: int) -> str:
    return {1: "", 2: "2nd", 3: "3rd"}.get(cadence, f"{cadence}th") or "single"
