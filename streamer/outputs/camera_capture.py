"""Camera (or looped video file) capture with PyAV, read newest-frame-first.

A capture thread decodes continuously and keeps only the latest frame; a reader that is slower than the
camera skips frames (counted as drops) instead of falling behind, so latency stays bounded (DESIGN.md
section 2). Cameras open through FFmpeg's v4l2 (Linux), avfoundation (macOS) or dshow (Windows) input; a
path to a regular file is played at its own frame rate and looped, so the mode can be tried without one.
"""

import errno
import logging
import platform
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import av.container
import cv2
import numpy as np

from gpu_ops.errors import InvalidInputError, LivefuseError
from models.face import Frame

logger = logging.getLogger(__name__)

# FFmpeg input device per operating system (platform.system() value)
CAMERA_FORMATS: dict[str, str] = {"Linux": "v4l2", "Darwin": "avfoundation", "Windows": "dshow"}
DEFAULT_FILE_FPS = 30.0
JOIN_TIMEOUT_S = 2.0


class CameraNotFoundError(InvalidInputError):
    """The --device names no camera and no file."""


class CameraBusyError(LivefuseError):
    """The camera exists but another program holds it (or we may not open it)."""


class CameraDisconnectedError(LivefuseError):
    """The camera stopped delivering frames while capturing (unplugged, driver error)."""


@dataclass(frozen=True)
class CapturedFrame:
    """One frame as the reader gets it: RGB at the requested size, its capture number and time."""

    image: Frame
    index: int
    captured_at: float


def fit_frame(image: Frame, width: int, height: int) -> Frame:
    """Centre-crop to the target aspect ratio, then resize: fills width x height without distortion.

    Returns `image` itself when it already has the size (no copy on the common path).
    """
    source_height, source_width = image.shape[:2]
    if (source_width, source_height) == (width, height):
        return image
    if source_width * height > width * source_height:  # too wide: crop the sides
        crop_width = max(1, round(source_height * width / height))
        left = (source_width - crop_width) // 2
        image = image[:, left : left + crop_width]
    elif source_width * height < width * source_height:  # too tall: crop top and bottom
        crop_height = max(1, round(source_width * height / width))
        top = (source_height - crop_height) // 2
        image = image[top : top + crop_height]
    shrinking = image.shape[1] > width
    interpolation = cv2.INTER_AREA if shrinking else cv2.INTER_LINEAR
    return np.ascontiguousarray(cv2.resize(image, (width, height), interpolation=interpolation))


def camera_input(device: str, system: str | None = None) -> tuple[str, str]:
    """(FFmpeg url, input format) of a camera name: "0" means the first camera on every system."""
    system = system or platform.system()
    input_format = CAMERA_FORMATS.get(system)
    if input_format is None:
        raise CameraNotFoundError(f"no camera input for {system}; pass a video file as --device")
    if input_format == "v4l2":
        return (f"/dev/video{device}" if device.isdigit() else device), input_format
    if input_format == "dshow" and not device.startswith("video="):
        return f"video={device}", input_format
    return device, input_format


def open_capture(device: str, *, width: int, height: int, fps: float) -> av.container.InputContainer:
    """Open a camera or a video file; raise a one-line error naming what to do."""
    if Path(device).is_file():
        try:
            container = av.open(device)
        except (av.error.FFmpegError, OSError) as error:
            raise InvalidInputError(f"{device}: not a readable video file ({error})") from None
        if not container.streams.video:
            container.close()
            raise InvalidInputError(f"{device}: the file has no video stream")
        return container
    url, input_format = camera_input(device)
    options = {"video_size": f"{width}x{height}", "framerate": f"{fps:g}"}
    try:
        try:
            return av.open(url, format=input_format, options=options)
        except av.error.FFmpegError as error:
            if error.errno in (errno.ENOENT, errno.EBUSY, errno.EACCES):
                raise
            # the camera refused the size/rate: take its default mode (frames are fitted afterwards)
            logger.info("camera %s rejected %s (%s); opening in its default mode", url, options, error)
            return av.open(url, format=input_format)
    except av.error.FFmpegError as error:
        raise _camera_error(url, error) from None


def _camera_error(url: str, error: av.error.FFmpegError) -> LivefuseError:
    if error.errno == errno.ENOENT:
        found = sorted(str(path) for path in Path("/dev").glob("video*")) if url.startswith("/dev/") else []
        hint = f"cameras present: {', '.join(found)}" if found else "no /dev/video* device is present"
        if not url.startswith("/dev/"):
            hint = "pass a camera name or a video file"
        return CameraNotFoundError(f"camera {url} not found ({hint})")
    if error.errno == errno.EBUSY:
        return CameraBusyError(f"camera {url} is busy: another program is using it; close that program")
    if error.errno == errno.EACCES:
        return CameraBusyError(f"camera {url}: permission denied (add your user to the 'video' group)")
    return CameraNotFoundError(f"camera {url} cannot be opened as a video capture device ({error})")


class CameraCapture:
    """Capture thread + one-slot newest frame. `start()`, `read()`, idempotent `close()`.

    A file device is paced at its frame rate and looped; a file that never yields a frame, or a camera
    that stops, is an error raised by `read()`. Counters: `captured` (frames decoded), `dropped`
    (overwritten before a read), `loops` (file restarts), `corrupt_packets`.
    """

    def __init__(self, device: str, *, width: int, height: int, fps: float) -> None:
        self.device = device
        self.width = width
        self.height = height
        self.is_file = Path(device).is_file()
        self.captured = 0
        self.dropped = 0
        self.loops = 0
        self.corrupt_packets = 0
        self._container = open_capture(device, width=width, height=height, fps=fps)
        stream = self._container.streams.video[0]
        stream.thread_type = "AUTO"
        self.source_fps = float(stream.average_rate or DEFAULT_FILE_FPS)
        self._condition = threading.Condition()
        self._latest: tuple[int, float, av.VideoFrame] | None = None
        self._last_read_index = 0
        self._error: BaseException | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self) -> None:
        if self._thread is not None or self._closed:
            return
        self._thread = threading.Thread(target=self._run, name=f"capture {self.device}", daemon=True)
        self._thread.start()

    def read(self, timeout: float | None = None) -> CapturedFrame | None:
        """Block until a frame newer than the last one read arrives; the newest wins. None on timeout
        or after `close()`; a capture failure is raised here, in the reader's thread."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while True:
                if self._error is not None:
                    raise self._error
                if self._latest is not None and self._latest[0] > self._last_read_index:
                    index, captured_at, video_frame = self._latest
                    self._last_read_index = index
                    break
                if self._stopping.is_set():
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._condition.wait(remaining)
        rgb: Frame = video_frame.to_ndarray(format="rgb24")  # type: ignore[assignment]  # rgb24 is uint8
        return CapturedFrame(fit_frame(rgb, self.width, self.height), index, captured_at)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        with self._condition:
            self._condition.notify_all()
        if self._thread is None:
            self._container.close()  # never started: the thread that owns it does not exist
        else:
            self._thread.join(JOIN_TIMEOUT_S)
            if self._thread.is_alive():  # it closes the container itself when the device returns
                logger.warning("capture %s: thread still blocked in the device after close", self.device)
        logger.info(
            "capture %s closed: %d frames captured, %d dropped", self.device, self.captured, self.dropped
        )

    def _run(self) -> None:
        try:
            self._capture_frames()
        except Exception as error:  # noqa: BLE001 - handed to the reader, never lost in this thread
            if not self._stopping.is_set():
                logger.debug("capture %s failed: %r", self.device, error)
                with self._condition:
                    self._error = _capture_failure(self.device, error)
                    self._condition.notify_all()
        finally:
            self._container.close()  # the capture thread owns the container once started

    def _capture_frames(self) -> None:
        interval = 1.0 / self.source_fps
        started = time.monotonic()
        paced = 0
        while not self._stopping.is_set():
            frames_this_pass = 0
            for video_frame in self._decode_pass():
                if self._stopping.is_set():
                    return
                if self.is_file:  # play at the file's rate, like a camera would deliver it
                    paced += 1
                    delay = started + paced * interval - time.monotonic()
                    if delay > 0 and self._stopping.wait(delay):
                        return
                frames_this_pass += 1
                self._publish(video_frame)
            if not self.is_file:
                raise CameraDisconnectedError(f"camera {self.device} stopped delivering frames")
            if frames_this_pass == 0:
                raise InvalidInputError(f"{self.device}: the video has no decodable frames")
            self.loops += 1
            self._container.seek(0)

    def _decode_pass(self) -> Iterator[av.VideoFrame]:
        """Frames until end of input; a corrupt packet is skipped (counted), as a decoder would."""
        for packet in self._container.demux(video=0):
            try:
                yield from packet.decode()
            except av.error.InvalidDataError as error:
                self.corrupt_packets += 1
                logger.debug("capture %s: skipping a corrupt packet: %s", self.device, error)

    def _publish(self, video_frame: av.VideoFrame) -> None:
        with self._condition:
            self.captured += 1
            if self._latest is not None and self._latest[0] > self._last_read_index:
                self.dropped += 1
            self._latest = (self.captured, time.monotonic(), video_frame)
            self._condition.notify_all()


def _capture_failure(device: str, error: Exception) -> Exception:
    if isinstance(error, LivefuseError):
        return error
    if isinstance(error, av.error.FFmpegError):
        return CameraDisconnectedError(f"capture from {device} failed: {error}")
    return error
