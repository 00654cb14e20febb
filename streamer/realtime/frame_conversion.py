"""How the worker turns a decoded `av.VideoFrame` into the pipeline's RGB frame and back.

Two ways, one interface, chosen once per daemon from the compute backend:

- `HostFrameConversion` (CPU backend): libswscale to RGB and back, NumPy frames, with one pair of
  swscale contexts per session kept between frames (`Swscale`). The fastest CPU path.
- `DeviceFrameConversion` (GPU backend): the decoded I420 planes are uploaded as they are (one pinned
  staging buffer per session, one async copy, `streamer.realtime.device_frames`), converted to RGB by the colour
  kernel, swapped by a pipeline that stays on the device, converted back to I420 on the device and
  downloaded into a pinned ring with one copy. A frame crosses the bus exactly twice; the `BusLedger`
  counts it. With `HostTransfers` the same code runs on the CPU mirrors (tests, `--frame-path device`).

Frames the device path cannot take as planes (not yuv420p, odd sizes) are converted on the host and
moved with one copy each way, counted too, so a strange stream costs speed, never correctness.

Given the picture the pipeline was handed (`source`), both paths send a swapped frame as its decoded
planes with only the changed boxes converted back (`streamer.realtime.yuv_outside_face`); without it,
the whole frame is converted.
"""

import contextlib
import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from av import VideoFrame
from av.video.reformatter import VideoReformatter

from gpu_ops.backend import to_host
from gpu_ops.colorspace import i420_to_rgb, rgb_to_i420
from gpu_ops.errors import InvalidFrameError, InvalidInputError
from gpu_ops.i420_patch import (
    Planes,
    changed_boxes,
    merged_i420,
    patched_box,
    write_box,
)
from streamer.pipeline.choices import FRAME_PATH_CHOICES, FramePathChoice
from streamer.pipeline.compute_backend import ComputeBackend
from streamer.realtime.device_frames import (
    BusLedger,
    CupyTransfers,
    DeviceFrames,
    HostTransfers,
    I420Planes,
    Transfers,
    planes_of_video_frame,
)
from streamer.realtime.yuv_outside_face import (
    AV_COLOR_RANGE_FULL,
    AV_COLORSPACE_BT709,
    DrawnBox,
    colour_tags,
    copy_of_frame,
    drawn_boxes,
    patchable,
    with_timing,
)

__all__ = ["AV_COLORSPACE_BT709", "AV_COLOR_RANGE_FULL", "colour_tags"]  # re-exported: callers name them here

logger = logging.getLogger(__name__)


class FrameConversion(Protocol):
    """Per-session conversions; `to_pipeline` is called on the worker thread, `to_video_frame` there
    too, or on the worker's swap stage where `overlap_safe` (never both for one frame at once)."""

    overlap_safe: bool  # to_pipeline of one frame may run beside to_video_frame of an earlier one

    def to_pipeline(self, session_id: str, video_frame: VideoFrame) -> Any: ...

    def to_video_frame(
        self,
        session_id: str,
        output: Any,
        like: VideoFrame,
        *,
        source: Any = None,
        drawn: Sequence[DrawnBox] = (),
    ) -> VideoFrame:
        """`output` as a frame to send, with `like`'s timing. `source`: what `to_pipeline` gave for
        `like`; then only where `output` differs from it, and the `drawn` boxes, are converted back, the
        rest is `like`'s planes as decoded, and an unchanged frame is `like` itself."""
        ...

    def forget(self, session_id: str) -> None: ...

    def activate(self) -> AbstractContextManager[Any]:
        """Entered once by the worker thread around all its work (the device's stream, if any)."""
        ...

    def describe(self) -> str: ...


def rgb_to_video_frame(rgb: Any, like: VideoFrame) -> VideoFrame:
    """A host RGB frame back to yuv420p (what the encoders want) with the input's pts/time_base."""
    return with_timing(VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p"), like)


class Swscale:
    """yuv420p <-> rgb24 through two libswscale contexts kept between frames, on one slice thread.

    `frame.to_ndarray(format=...)` and `frame.reformat(...)` give every frame its own context, and with
    PyAV's default (threads=0: one per core) its own pool of slice threads, built for that frame and
    torn down on whichever thread drops it, the event loop included. At 640x480 that cost 0.7 ms of a
    2-core machine's time per frame for nothing. Not thread-safe: one owner thread.
    """

    def __init__(self) -> None:
        self._to_rgb = VideoReformatter()
        self._to_yuv = VideoReformatter()

    def to_rgb(self, video_frame: VideoFrame) -> Any:
        return self._to_rgb.reformat(video_frame, format="rgb24", threads=1).to_ndarray()

    def to_yuv420p(self, rgb: Any, like: VideoFrame | None = None) -> VideoFrame:
        rgb_frame = VideoFrame.from_ndarray(rgb, format="rgb24")
        output = self._to_yuv.reformat(rgb_frame, format="yuv420p", threads=1)
        return output if like is None else with_timing(output, like)


class HostFrameConversion:
    """libswscale both ways, one `Swscale` per session (sessions may differ in size). Its two contexts
    are separate, and each call makes a new frame, so converting one frame in while another goes out
    is safe."""

    overlap_safe = True

    def __init__(self) -> None:
        self._sessions: dict[str, Swscale] = {}

    def _swscale(self, session_id: str) -> Swscale:
        swscale = self._sessions.get(session_id)
        if swscale is None:
            swscale = self._sessions[session_id] = Swscale()
        return swscale

    def to_pipeline(self, session_id: str, video_frame: VideoFrame) -> Any:
        return self._swscale(session_id).to_rgb(video_frame)

    def to_video_frame(
        self,
        session_id: str,
        output: Any,
        like: VideoFrame,
        *,
        source: Any = None,
        drawn: Sequence[DrawnBox] = (),
    ) -> VideoFrame:
        if source is None or not patchable(like, source, output):
            return self._swscale(session_id).to_yuv420p(output, like)
        return patch_on_host(like, source, output, drawn)

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def activate(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def describe(self) -> str:
        return "host"


def patch_on_host(like: VideoFrame, source: Any, output: Any, drawn: Sequence[DrawnBox]) -> VideoFrame:
    """`like`'s decoded planes with the boxes where host `output` differs from `source`, and the drawn
    ones, converted from `output`; `like` itself when there are none (the frame is never converted)."""
    boxes = [] if output is source else changed_boxes(source, output)
    labelled = drawn_boxes(drawn, like.width, like.height)
    if not boxes and not labelled:
        return like
    decoded = Planes(*planes_of_video_frame(like))
    frame, planes = copy_of_frame(like)
    colorspace, full_range = colour_tags(like)
    for box in boxes:
        write_box(
            planes,
            box,
            patched_box(decoded, source, output, box, colorspace=colorspace, full_range=full_range),
        )
    for box in labelled:
        patch = patched_box(
            decoded, source, output, box, colorspace=colorspace, full_range=full_range, whole=True
        )
        write_box(planes, box, patch)
    return with_timing(frame, like)


class DeviceFrameConversion:
    """Planes up, RGB on the device, I420 down; one `DeviceFrames` (pinned buffers) per session.

    Output is BT.601 limited, like the host path's libswscale default, so a viewer sees the same
    colours whichever path ran. Given `source`, the frame that goes down is the uploaded planes with the
    changed pixels merged in on the device (`merged_i420`): the host path's planes bit for bit, still one
    copy down; an unchanged frame is not copied at all. The merge reads the session's uploaded planes,
    which the next upload overwrites, and the device has one stream: one thread (`overlap_safe` False).
    """

    overlap_safe = False

    def __init__(self, transfers: Transfers, *, ledger: BusLedger | None = None) -> None:
        self.transfers = transfers
        self.ledger = ledger or BusLedger()
        self._sessions: dict[str, DeviceFrames] = {}
        self._warned_fallback = False

    def to_pipeline(self, session_id: str, video_frame: VideoFrame) -> Any:
        try:
            planes = planes_of_video_frame(video_frame)
            uploaded = self._frames_of(session_id).upload(planes)
        except InvalidFrameError as reason:
            return self._upload_rgb(video_frame, reason)
        colorspace, full_range = colour_tags(video_frame)
        return i420_to_rgb(*uploaded, colorspace=colorspace, full_range=full_range)

    def to_video_frame(
        self,
        session_id: str,
        output: Any,
        like: VideoFrame,
        *,
        source: Any = None,
        drawn: Sequence[DrawnBox] = (),
    ) -> VideoFrame:
        height, width = output.shape[:2]
        if height % 2 or width % 2:
            return self._download_rgb(output, like)
        frames = self._frames_of(session_id)
        decoded = frames.uploaded
        if source is not None and decoded is not None and patchable(like, source, output):
            labelled = drawn_boxes(drawn, width, height)
            if output is source and not labelled:
                return like  # nothing changed: the decoded frame as it came, nothing converted or copied
            colorspace, full_range = colour_tags(like)
            planes = merged_i420(
                Planes(*decoded), source, output, labelled, colorspace=colorspace, full_range=full_range
            )
        else:
            planes = Planes(*rgb_to_i420(output))
        slot = frames.download_packed(I420Planes(*planes))
        frames.finish()  # the encoder reads the slot next: the copy (and every kernel before it) is done
        i420 = slot.reshape(height * 3 // 2, width)
        return with_timing(VideoFrame.from_ndarray(i420, format="yuv420p"), like)

    def forget(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def activate(self) -> AbstractContextManager[Any]:
        stream = getattr(self.transfers, "stream", None)  # CupyTransfers: kernels, copies and ORT share it
        return contextlib.nullcontext() if stream is None else stream  # type: ignore[no-any-return]

    def describe(self) -> str:
        return f"device ({'cupy' if self.transfers.xp.__name__ == 'cupy' else 'numpy mirror'})"

    def _frames_of(self, session_id: str) -> DeviceFrames:
        frames = self._sessions.get(session_id)
        if frames is None:
            frames = DeviceFrames(self.transfers, ledger=self.ledger)
            self._sessions[session_id] = frames
        return frames

    def _upload_rgb(self, video_frame: VideoFrame, reason: InvalidFrameError) -> Any:
        if not self._warned_fallback:
            self._warned_fallback = True
            logger.warning("frames converted on the host before upload: %s", reason)
        rgb = video_frame.to_ndarray(format="rgb24")
        self.ledger.record_upload(rgb.nbytes)
        return self.transfers.xp.asarray(rgb)

    def _download_rgb(self, output: Any, like: VideoFrame) -> VideoFrame:
        rgb = to_host(output)
        self.ledger.record_download(rgb.nbytes)
        return rgb_to_video_frame(rgb, like)


def choose_frame_conversion(choice: FramePathChoice, backend: ComputeBackend | None) -> FrameConversion:
    """`auto`: device when the backend is CuPy, else host. `device` on a CPU backend runs the device
    path on its NumPy mirrors (slower than libswscale; for checking the GPU path's logic without one)."""
    if choice not in FRAME_PATH_CHOICES:
        raise InvalidInputError(f"frame path must be one of {list(FRAME_PATH_CHOICES)}, got {choice!r}")
    on_gpu = backend is not None and backend.on_gpu
    conversion: FrameConversion
    if choice == "host" or (choice == "auto" and not on_gpu):
        conversion = HostFrameConversion()
    elif on_gpu:
        assert backend is not None
        conversion = DeviceFrameConversion(CupyTransfers(backend.stream))
    else:
        conversion = DeviceFrameConversion(HostTransfers())
    logger.info("frame path: %s (asked for %s)", conversion.describe(), choice)
    return conversion
