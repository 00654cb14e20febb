"""VP8 works less while the daemon sheds frames, and goes back to full effort only after it caught up
for a while; each change of effort is a new libvpx context, a steady effort keeps the one it has."""

import fractions
from collections.abc import Iterator

import av
import numpy as np
import pytest

from streamer.transport import codec_tuning
from streamer.transport.codec_tuning import TunedVp8Encoder
from streamer.transport.encoder_effort import RELAX_AFTER_S, VP8_SPEED, VP8_SPEED_STRAINED, EncoderEffort


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def effort(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> Iterator[EncoderEffort]:
    effort = EncoderEffort(clock)
    monkeypatch.setattr(codec_tuning, "encoder_effort", effort)  # not the process-wide one
    yield effort


def _frame(index: int) -> av.VideoFrame:
    pixels = np.random.default_rng(index).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    frame = av.VideoFrame.from_ndarray(pixels, format="rgb24").reformat(format="yuv420p")
    frame.pts, frame.time_base = index * 3000, fractions.Fraction(1, 90000)
    return frame


def test_the_effort_drops_at_once_and_returns_only_after_the_daemon_caught_up(
    effort: EncoderEffort, clock: Clock
) -> None:
    assert effort.vp8_speed == VP8_SPEED == -6
    effort.set_strained(True)
    assert effort.vp8_speed == VP8_SPEED_STRAINED == -12
    effort.set_strained(False)
    clock.now += RELAX_AFTER_S - 1.0
    assert effort.vp8_speed == VP8_SPEED_STRAINED  # a cadence that steps back down soon keeps it
    effort.set_strained(True)
    effort.set_strained(False)
    clock.now += RELAX_AFTER_S - 1.0
    assert effort.vp8_speed == VP8_SPEED_STRAINED  # the wait starts again from the last catch-up
    clock.now += 1.5
    assert effort.vp8_speed == VP8_SPEED


def _context_for(tuned: TunedVp8Encoder, index: int) -> tuple[object, str]:
    """The context `tuned` encodes frame `index` with, and its cpu-used (read before the frame opens it)."""
    frame = _frame(index)
    tuned._prepare_context(tuned._size_bitrate(frame))
    context = tuned.codec
    assert context is not None
    speed = context.options.get("cpu-used", "(open: consumed)")
    payloads, _ = tuned.encode(frame)
    assert payloads and tuned.codec is context  # aiortc keeps the context it found
    return context, speed


def test_a_vp8_encoder_rebuilds_its_context_when_the_effort_changes_and_only_then(
    effort: EncoderEffort, clock: Clock
) -> None:
    tuned = TunedVp8Encoder()
    relaxed, speed = _context_for(tuned, 0)
    assert speed == "-6"
    assert _context_for(tuned, 1)[0] is relaxed
    effort.set_strained(True)
    strained, speed = _context_for(tuned, 2)
    assert strained is not relaxed and speed == "-12"
    assert _context_for(tuned, 3)[0] is strained
    effort.set_strained(False)
    assert _context_for(tuned, 4)[0] is strained  # still relaxing
    clock.now += RELAX_AFTER_S + 0.1
    again, speed = _context_for(tuned, 5)
    assert again is not strained and speed == "-6"
