"""Local outputs of camera mode: a pyvirtualcam virtual camera and a browser preview.

The virtual camera (v4l2loopback on Linux, OBS Virtual Camera on Windows/macOS) takes RGB frames at the
camera rate; pyvirtualcam reports every failure as a bare RuntimeError, translated here into one line that
says how to create the device. opencv-headless has no window, so `--preview` is an MJPEG stream served on
127.0.0.1 (open the printed URL in any browser): it shows the live output, not snapshots, and costs nothing
while nobody watches (frames are JPEG-encoded only when a viewer is connected).
"""

import http.server
import logging
import platform
import threading
import time

import cv2
import numpy as np
import pyvirtualcam

from gpu_ops.errors import InvalidFrameError, InvalidInputError, LivefuseError
from models.face import Frame

logger = logging.getLogger(__name__)

MODPROBE_LINE = 'sudo modprobe v4l2loopback devices=1 video_nr=10 card_label="livefuse" exclusive_caps=1'
OBS_HINT = "install OBS Studio 30+ and start its Virtual Camera once (Tools -> Start Virtual Camera)"
PREVIEW_HOST = "127.0.0.1"
PREVIEW_PORT = 8765
PREVIEW_MAX_FPS = 15.0
PREVIEW_JPEG_QUALITY = 80
BOUNDARY = "livefuseframe"


class VirtualCameraError(LivefuseError):
    """The virtual camera device is missing, busy or refuses the size/format."""


class VirtualCameraSink:
    """A pyvirtualcam camera taking RGB frames of exactly width x height; `close()` is idempotent."""

    def __init__(
        self, width: int, height: int, fps: float, *, backend: str | None = None, device: str | None = None
    ) -> None:
        self.width = width
        self.height = height
        self.fps = fps
        if backend is not None and backend not in pyvirtualcam.camera.BACKENDS:
            known = ", ".join(sorted(pyvirtualcam.camera.BACKENDS)) or "none on this system"
            raise InvalidInputError(f"unknown virtual camera backend {backend!r} (known: {known})")
        try:
            self._camera = pyvirtualcam.Camera(
                width, height, fps, fmt=pyvirtualcam.PixelFormat.RGB, backend=backend, device=device
            )
        except RuntimeError as error:
            raise VirtualCameraError(virtual_camera_hint(str(error))) from None
        self.backend: str = self._camera.backend
        self.device: str = self._camera.device
        self._closed = False
        logger.info("virtual camera %s (%s): %dx%d at %g fps", self.device, self.backend, width, height, fps)

    @property
    def frames_sent(self) -> int:
        return int(self._camera.frames_sent)

    def send(self, frame: Frame) -> None:
        if frame.shape != (self.height, self.width, 3) or frame.dtype != np.uint8:
            raise InvalidFrameError(
                f"virtual camera takes uint8 {self.height}x{self.width}x3 RGB, got {frame.dtype} {frame.shape}"
            )
        self._camera.send(frame)

    def sleep_until_next_frame(self) -> None:
        """pyvirtualcam's adaptive pacing: keeps the send rate at `fps` whatever the work per frame."""
        self._camera.sleep_until_next_frame()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._camera.close()
        logger.info("virtual camera %s closed after %d frames", self.device, self.frames_sent)


def virtual_camera_hint(pyvirtualcam_message: str, system: str | None = None) -> str:
    """One line: pyvirtualcam's reason (first line, backend prefix dropped) and the fix for the system."""
    reason = pyvirtualcam_message.strip().splitlines()[0] if pyvirtualcam_message.strip() else "unknown"
    if "backend: " in reason:
        reason = reason.split("backend: ", 1)[1]
    system = system or platform.system()
    if system == "Linux":
        if "busy" in reason.lower():
            fix = "another program writes to it; pick another with --virtual-cam-device"
        else:
            fix = f"create one with: {MODPROBE_LINE}"
    else:
        fix = OBS_HINT
    return f"virtual camera unavailable: {reason.rstrip('.')}; {fix}"


class _LatestJpeg:
    """The newest encoded preview frame; viewers wait on the condition for the next one."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.jpeg: bytes = b""
        self.sequence = 0
        self.viewers = 0
        self.closed = False


class PreviewServer:
    """MJPEG-over-HTTP preview on 127.0.0.1: `/` is a page with the video, `/stream.mjpg` the stream."""

    def __init__(self, port: int = PREVIEW_PORT, max_fps: float = PREVIEW_MAX_FPS) -> None:
        self._latest = _LatestJpeg()
        self._min_interval = 0.9 / max_fps  # slack: a frame a hair early is not skipped
        self._last_encoded = 0.0
        handler = _make_handler(self._latest)
        try:
            self._server = http.server.ThreadingHTTPServer((PREVIEW_HOST, port), handler)
        except OSError:  # port taken: any free one will do, the URL is logged
            self._server = http.server.ThreadingHTTPServer((PREVIEW_HOST, 0), handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self.url = f"http://{PREVIEW_HOST}:{self.port}/"
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self) -> None:
        if self._thread is not None or self._closed:
            return
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="preview", daemon=True
        )
        self._thread.start()
        logger.info("preview at %s", self.url)

    @property
    def viewers(self) -> int:
        return self._latest.viewers

    def publish(self, frame: Frame) -> bool:
        """Encode and offer `frame` to viewers (rate-capped; skipped without viewers). True if sent."""
        now = time.monotonic()
        if self._latest.viewers == 0 or now - self._last_encoded < self._min_interval:
            return False
        self._last_encoded = now
        bgr = cv2.cvtColor(frame, cv2.COLOR_RGB2BGR)
        ok, encoded = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, PREVIEW_JPEG_QUALITY])
        if not ok:
            return False
        with self._latest.condition:
            self._latest.jpeg = encoded.tobytes()
            self._latest.sequence += 1
            self._latest.condition.notify_all()
        return True

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._latest.condition:
            self._latest.closed = True
            self._latest.condition.notify_all()
        if self._thread is not None:
            self._server.shutdown()
        self._server.server_close()


PAGE = (
    "<!doctype html><title>livefuse preview</title>"
    '<body style="margin:0;background:#000;display:flex;height:100vh">'
    '<img src="/stream.mjpg" style="margin:auto;max-width:100%;max-height:100%" alt="preview">'
)


def _make_handler(latest: _LatestJpeg) -> type[http.server.BaseHTTPRequestHandler]:
    class PreviewHandler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/":
                body = PAGE.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif self.path == "/stream.mjpg":
                self._stream()
            else:
                self.send_error(404)

        def _stream(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={BOUNDARY}")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            seen = 0
            with latest.condition:
                latest.viewers += 1
            try:
                while True:
                    with latest.condition:
                        if not latest.closed and latest.sequence == seen:
                            latest.condition.wait(1.0)  # notified on every new frame and on close
                        if latest.closed:
                            return
                        if latest.sequence == seen:
                            continue
                        seen, jpeg = latest.sequence, latest.jpeg
                    head = f"--{BOUNDARY}\r\nContent-Type: image/jpeg\r\nContent-Length: {len(jpeg)}\r\n\r\n"
                    self.wfile.write(head.encode() + jpeg + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the viewer closed the tab
            finally:
                with latest.condition:
                    latest.viewers -= 1

        def log_message(self, format: str, *args: object) -> None:
            logger.debug("preview %s: " + format, self.client_address[0], *args)

    return PreviewHandler
