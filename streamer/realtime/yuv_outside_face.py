"""A swapped frame goes out as the decoder's I420 planes with only the face regions replaced.

The worker used to convert every swapped frame back from RGB as a whole (libswscale: 6.4 ms at 720p,
17.8 ms at 1080p on this project's CPU; on the device, the whole frame down the bus). Now the frame's
decoded planes are copied once (a memcpy) and only the boxes where the pipeline's output differs from
the picture it was given, plus any box drawn over it (the provenance label), are converted and merged
in (`gpu_ops.i420_patch`). A frame the pipeline did not change is sent as it was decoded, never
converted. Frames the planes do not fit (not yuv420p, odd sizes, a picture of another size) are left to
the whole-frame conversion, so a strange stream costs speed, never correctness.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
from av import VideoFrame

from gpu_ops.colorspace import Colorspace
from gpu_ops.i420_patch import Box, Planes, even_box
from streamer.realtime.device_frames import planes_of_video_frame

DrawnBox = tuple[int, int, int, int]  # (x1, y1, x2, y2) of something drawn over the picture in place

AV_COLORSPACE_BT709 = (
    1  # av.VideoFrame.colorspace / color_range values (FFmpeg's AVColorSpace / AVColorRange)
)
AV_COLOR_RANGE_FULL = 2  # AVCOL_RANGE_JPEG


def colour_tags(video_frame: VideoFrame) -> tuple[Colorspace, bool]:
    """The frame's matrix and range as the colour kernels name them; untagged means BT.601 limited
    (DESIGN.md section 5: what browsers send), which is also how libswscale reads an untagged frame."""
    colorspace: Colorspace = "bt709" if video_frame.colorspace == AV_COLORSPACE_BT709 else "bt601"
    return colorspace, video_frame.color_range == AV_COLOR_RANGE_FULL


def patchable(like: VideoFrame, source: Any, output: Any) -> bool:
    """Whether `output` can go out as `like`'s planes with its changed boxes merged in."""
    return bool(
        like.format.name == "yuv420p"
        and like.width % 2 == 0
        and like.height % 2 == 0
        and getattr(source, "shape", None) == (like.height, like.width, 3)
        and getattr(output, "shape", None) == source.shape
    )


def drawn_boxes(drawn: Sequence[DrawnBox], width: int, height: int) -> list[Box]:
    """Drawn regions as even-aligned boxes inside the frame (an empty drawing gives none)."""
    boxes = (even_box(x1, y1, x2, y2, width, height) for x1, y1, x2, y2 in drawn)
    return [box for box in boxes if box is not None]


def copy_of_frame(like: VideoFrame) -> tuple[VideoFrame, Planes]:
    """A new yuv420p frame holding a copy of `like`'s planes and colour tags, and writable views of its
    planes (the patch is written there; `like` itself may still go out elsewhere or be sent on a failure)."""
    frame = VideoFrame(like.width, like.height, "yuv420p")
    planes = Planes(*planes_of_video_frame(frame))
    for target, decoded in zip(planes, planes_of_video_frame(like)):
        np.copyto(target, decoded)
    frame.colorspace, frame.color_range = like.colorspace, like.color_range
    return frame, planes


def with_timing(output: VideoFrame, like: VideoFrame) -> VideoFrame:
    """`output` with `like`'s pts and time_base (so the encoder's RTP timestamps follow the camera's)."""
    output.pts = like.pts
    if like.time_base is not None:  # a frame made from an array has none (PyAV refuses to set None)
        output.time_base = like.time_base
    return output
