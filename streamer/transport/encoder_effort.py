"""How hard the VP8 encoders work: less while the daemon is short of CPU.

libvpx's realtime speed (`cpu-used`) is aiortc's and libwebrtc's desktop -6 while the daemon keeps up,
and -12, libwebrtc's choice for CPUs of three cores or fewer, while its swap cadence sheds frames
(web/engine.py sets it from streamer.realtime.swap_cadence). A 640x480 frame then encodes in 1.9 ms
instead of 2.8 and comes out 0.9 dB further from the frame handed over (Y-PSNR at the same bitrate, the
Hamilton clip); three 480p calls on this 2-core machine came back with p50 78 -> 69 ms, p95 120 -> 115,
and a 1080p close-up with p50 168 -> 151, p95 224 -> 196 (docs/benchmarks.md). Back to -6 once the cadence has swapped every frame for RELAX_AFTER_S, so a cadence
that steps down and up again does not rebuild the encoders (each new context is a keyframe) every time.
The mesh swap reads the same state (`strained`) for its working size (MeshEngine.set_strain, wired in
web/engine.py): the two things a strained daemon can do less of per frame without dropping it.
"""

import logging
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

VP8_SPEED = -6
VP8_SPEED_STRAINED = -12
RELAX_AFTER_S = 10.0  # of swapping every frame before the encoders work harder again


class EncoderEffort:
    """`set_strained` on the event loop, `vp8_speed` read by the encoders on their threads (one plain
    attribute each way)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._strained = False
        self._relaxed_at: float | None = None  # when the daemon last caught up

    def set_strained(self, strained: bool) -> None:
        """Whether the daemon sheds frames for want of CPU now."""
        if strained == self._strained:
            return
        self._strained = strained
        self._relaxed_at = None if strained else self._clock()
        logger.info(
            "encoder effort: %s",
            "short of CPU, faster VP8" if strained else f"caught up, faster VP8 for {RELAX_AFTER_S:g} s more",
            extra={"event": "encoder_effort", "strained": strained},
        )

    @property
    def strained(self) -> bool:
        """Short of CPU now, or caught up less than RELAX_AFTER_S ago (what works less keeps working less)."""
        relaxing = self._relaxed_at is not None and self._clock() - self._relaxed_at < RELAX_AFTER_S
        return self._strained or relaxing

    @property
    def vp8_speed(self) -> int:
        """libvpx `cpu-used` for a new VP8 context."""
        return VP8_SPEED_STRAINED if self.strained else VP8_SPEED


encoder_effort = EncoderEffort()  # process-wide, like install_codec_tuning
