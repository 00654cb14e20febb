"""A stamped frame's copy for viewers has no readable stamp, keeps the rest of the picture and the
timing, and leaves the original (the sender's own video) stamped."""

from fractions import Fraction

import numpy as np
import pytest
from av import VideoFrame

from streamer.outputs.frame_stamp import STAMP_HEIGHT, STAMP_WIDTH, read_stamp, write_stamp
from streamer.realtime.stamp_blanking import without_stamp


def _picture(width: int = 640, height: int = 480) -> np.ndarray:
    """A mid-grey picture with a horizontal gradient, so the filled strip has something to copy."""
    ramp = np.linspace(60, 190, width, dtype=np.float32)
    rgb = np.empty((height, width, 3), np.uint8)
    rgb[:] = ramp[None, :, None].astype(np.uint8)
    return rgb


def _rgb(frame: VideoFrame) -> np.ndarray:
    return np.asarray(frame.to_ndarray(format="rgb24"), np.uint8)


@pytest.mark.parametrize("pixel_format", ["yuv420p", "rgb24"])
def test_the_copy_has_no_stamp_and_the_original_keeps_it(pixel_format: str) -> None:
    rgb = _picture()
    write_stamp(rgb, 0xA5A5F00F)
    frame = VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format=pixel_format)
    frame.pts, frame.time_base = 4500, Fraction(1, 90000)

    blanked = without_stamp(frame)

    assert read_stamp(_rgb(frame)) == 0xA5A5F00F  # the sender's frame is untouched
    assert read_stamp(_rgb(blanked)) is None
    out = blanked.to_ndarray(format="rgb24").astype(np.int16)
    # the strip now continues the picture: close to the row below it, not black and white blocks
    strip, below = out[:STAMP_HEIGHT, :STAMP_WIDTH], out[STAMP_HEIGHT + 2, :STAMP_WIDTH]
    assert np.abs(strip - below[None]).max() <= 4
    # the rest of the picture is the same picture
    original = frame.to_ndarray(format="rgb24").astype(np.int16)
    assert np.array_equal(out[STAMP_HEIGHT + 1 :], original[STAMP_HEIGHT + 1 :])
    assert np.array_equal(out[:, STAMP_WIDTH + 2 :], original[:, STAMP_WIDTH + 2 :])
    assert (blanked.width, blanked.height, blanked.format.name) == (640, 480, pixel_format)
    assert (blanked.pts, blanked.time_base) == (4500, Fraction(1, 90000))


def test_frames_narrower_than_the_strip_and_tiny_frames() -> None:
    narrow = np.zeros((120, 160, 3), np.uint8)
    narrow[:STAMP_HEIGHT] = 255
    narrow[STAMP_HEIGHT:] = 100
    out = without_stamp(VideoFrame.from_ndarray(narrow, format="rgb24").reformat(format="yuv420p"))
    assert np.abs(out.to_ndarray(format="rgb24").astype(np.int16) - 100).max() <= 3
    tiny = VideoFrame.from_ndarray(np.full((8, 8, 3), 50, np.uint8), format="rgb24")
    assert np.array_equal(without_stamp(tiny).to_ndarray(format="rgb24"), tiny.to_ndarray(format="rgb24"))
