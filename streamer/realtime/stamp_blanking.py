"""What others watch carries no latency stamp: a copy of a session's outgoing frame with the stamp strip
(`streamer.outputs.frame_stamp`, the top-left 512x16 px) filled from the row just below it.

A sender that measures latency paints stamps into its frames and reads them back from its own video; the
daemon never draws them. When the session says it stamps (the `latency_stamp` setting), the frames for its
WHEP viewers and the /view page go through `without_stamp`, so the black and white blocks reach only the
sender. The copy works on the I420 planes as they are (no colour conversion, about 0.1 ms at 640x480);
other pixel formats go through RGB. The original frame is never touched: the sender's own track still
carries the stamp.
"""

import numpy as np
from av import VideoFrame

from streamer.outputs.frame_stamp import STAMP_HEIGHT, STAMP_WIDTH


def _plane_array(plane: object, height: int) -> np.ndarray:
    """A writable (height, line_size) view of one plane's bytes."""
    return np.frombuffer(plane, np.uint8).reshape(height, -1)  # type: ignore[call-overload]


def _fill_strip(pixels: np.ndarray, strip_height: int, strip_width: int) -> None:
    """Rows 0..strip_height-1 of the first strip_width columns become a copy of row strip_height."""
    if pixels.shape[0] <= strip_height:
        return  # too small to hold a stamp and a row to fill it from
    width = min(strip_width, pixels.shape[1])
    pixels[:strip_height, :width] = pixels[strip_height, :width]


def without_stamp(frame: VideoFrame) -> VideoFrame:
    """A copy of `frame` whose stamp strip shows the picture's next row instead; pts and time_base kept."""
    if frame.format.name == "yuv420p" and frame.width % 2 == 0 and frame.height % 2 == 0:
        copy = VideoFrame(frame.width, frame.height, "yuv420p")
        for index, (source, target) in enumerate(zip(frame.planes, copy.planes, strict=True)):
            shift = 0 if index == 0 else 1  # chroma planes are half size both ways
            plane_width, plane_height = frame.width >> shift, frame.height >> shift
            pixels = _plane_array(target, plane_height)
            pixels[:, :plane_width] = _plane_array(source, plane_height)[:, :plane_width]
            _fill_strip(pixels[:, :plane_width], STAMP_HEIGHT >> shift, STAMP_WIDTH >> shift)
    else:
        rgb = frame.to_ndarray(format="rgb24").copy()  # an rgb24 frame hands out a view of its own pixels
        _fill_strip(rgb, STAMP_HEIGHT, STAMP_WIDTH)
        copy = VideoFrame.from_ndarray(rgb, format="rgb24")
    copy.pts = frame.pts
    if frame.time_base is not None:
        copy.time_base = frame.time_base
    return copy
