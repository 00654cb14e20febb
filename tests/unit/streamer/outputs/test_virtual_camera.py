"""Virtual camera sink through a pyvirtualcam backend registered here, and the MJPEG preview."""

import http.client
import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import cv2
import numpy as np
import pytest
import pyvirtualcam
from pyvirtualcam.util import encode_fourcc

from gpu_ops.errors import InvalidFrameError, InvalidInputError
from streamer.outputs.virtual_camera import (
    MODPROBE_LINE,
    PreviewServer,
    VirtualCameraError,
    VirtualCameraSink,
    virtual_camera_hint,
)

WIDTH, HEIGHT, FPS = 160, 120, 30


class RecordingBackend:
    """A pyvirtualcam backend that keeps every frame with its arrival time (no kernel module needed)."""

    instances: ClassVar[list["RecordingBackend"]] = []

    def __init__(
        self, *, width: int, height: int, fps: float, fourcc: int, device: str | None, **_: object
    ) -> None:
        self.width, self.height, self.fps, self.fourcc = width, height, fps, fourcc
        self.device_name = device or "/dev/video-test"
        self.frames: list[np.ndarray] = []
        self.arrivals: list[float] = []
        self.closed = 0
        RecordingBackend.instances.append(self)

    def send(self, frame: np.ndarray) -> None:
        self.frames.append(frame.copy())
        self.arrivals.append(time.perf_counter())

    def close(self) -> None:
        self.closed += 1

    def device(self) -> str:
        return self.device_name

    def native_fourcc(self) -> int:
        return self.fourcc


class MissingDeviceBackend:
    def __init__(self, **_: object) -> None:
        raise RuntimeError("Device /dev/video10 does not exist.")


@pytest.fixture
def recording_backend() -> Iterator[type[RecordingBackend]]:
    RecordingBackend.instances = []
    pyvirtualcam.register_backend("livefuse-test", RecordingBackend)
    pyvirtualcam.register_backend("livefuse-missing", MissingDeviceBackend)
    yield RecordingBackend
    pyvirtualcam.camera.BACKENDS.pop("livefuse-test", None)
    pyvirtualcam.camera.BACKENDS.pop("livefuse-missing", None)


def stamped_frame(counter: int) -> np.ndarray:
    frame = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    frame[:8, :8] = (counter & 0xFF, (counter >> 8) & 0xFF, 77)
    return frame


def read_stamp(flat: np.ndarray) -> int:
    frame = flat.reshape(HEIGHT, WIDTH, 3)
    return int(frame[4, 4, 0]) | (int(frame[4, 4, 1]) << 8)


def test_frames_arrive_in_order_as_rgb_of_the_right_size_at_the_camera_rate(
    recording_backend: type[RecordingBackend],
) -> None:
    sink = VirtualCameraSink(WIDTH, HEIGHT, FPS, backend="livefuse-test")
    sent = 2 * FPS
    for counter in range(sent):
        sink.send(stamped_frame(counter))
        sink.sleep_until_next_frame()
    sink.close()
    (backend,) = recording_backend.instances
    assert (backend.width, backend.height, backend.fps) == (WIDTH, HEIGHT, FPS)
    assert backend.fourcc == encode_fourcc("raw ")  # pyvirtualcam's RGB
    assert sink.device == "/dev/video-test" and sink.backend == "livefuse-test"
    assert [read_stamp(frame) for frame in backend.frames] == list(range(sent))
    assert all(frame.shape == (WIDTH * HEIGHT * 3,) and frame.dtype == np.uint8 for frame in backend.frames)
    mean_interval = (backend.arrivals[-1] - backend.arrivals[0]) / (sent - 1)
    assert mean_interval == pytest.approx(1 / FPS, rel=0.2)


def test_close_is_idempotent(recording_backend: type[RecordingBackend]) -> None:
    sink = VirtualCameraSink(WIDTH, HEIGHT, FPS, backend="livefuse-test", device="/dev/video42")
    assert sink.device == "/dev/video42"
    sink.close()
    sink.close()
    assert recording_backend.instances[0].closed == 1


def test_a_frame_of_the_wrong_size_is_refused(recording_backend: type[RecordingBackend]) -> None:
    sink = VirtualCameraSink(WIDTH, HEIGHT, FPS, backend="livefuse-test")
    with pytest.raises(InvalidFrameError, match="120x160x3"):
        sink.send(np.zeros((HEIGHT, WIDTH + 2, 3), np.uint8))
    sink.close()
    assert recording_backend.instances[0].frames == []


def test_missing_loopback_device_names_the_modprobe_line(
    recording_backend: type[RecordingBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("platform.system", lambda: "Linux")
    with pytest.raises(VirtualCameraError) as raised:
        VirtualCameraSink(WIDTH, HEIGHT, FPS, backend="livefuse-missing")
    message = str(raised.value)
    assert message.startswith("virtual camera unavailable: Device /dev/video10 does not exist;")
    assert MODPROBE_LINE in message and "exclusive_caps=1" in message and "\n" not in message


def test_unknown_backend_is_bad_input(recording_backend: type[RecordingBackend]) -> None:
    with pytest.raises(InvalidInputError, match="unknown virtual camera backend 'nope'.*livefuse-test"):
        VirtualCameraSink(WIDTH, HEIGHT, FPS, backend="nope")


def test_hint_per_system() -> None:
    pyvirtualcam_message = (
        "'v4l2loopback' backend: No v4l2 loopback device found at /dev/video[0-99]. "
        "Did you run 'modprobe v4l2loopback'?\n'other' backend: whatever"
    )
    linux = virtual_camera_hint(pyvirtualcam_message, "Linux")
    assert linux.startswith("virtual camera unavailable: No v4l2 loopback device found")
    assert linux.endswith(MODPROBE_LINE) and "other" not in linux
    assert "OBS" in virtual_camera_hint("'obs' backend: OBS Virtual Camera is not installed", "Windows")
    busy = virtual_camera_hint("'v4l2loopback' backend: Device or resource busy", "Linux")
    assert "--virtual-cam-device" in busy


def test_preview_serves_a_page_and_an_mjpeg_stream() -> None:
    preview = PreviewServer(port=0)
    preview.start()
    try:
        page = http.client.HTTPConnection("127.0.0.1", preview.port, timeout=5)
        page.request("GET", "/")
        response = page.getresponse()
        assert response.status == 200 and b'src="/stream.mjpg"' in response.read()
        page.close()
        assert not preview.publish(stamped_frame(1))  # nobody watches: nothing encoded

        stream = http.client.HTTPConnection("127.0.0.1", preview.port, timeout=5)
        stream.request("GET", "/stream.mjpg")
        response = stream.getresponse()
        assert response.getheader("Content-Type") == "multipart/x-mixed-replace; boundary=livefuseframe"
        received: list[bytes] = []
        reader = threading.Thread(target=lambda: received.append(_read_one_part(response)))
        reader.start()
        deadline = time.monotonic() + 5
        while reader.is_alive() and time.monotonic() < deadline:
            preview.publish(stamped_frame(2))
            time.sleep(0.02)
        reader.join(1)
        stream.close()
    finally:
        preview.close()
        preview.close()
    (jpeg,) = received
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    assert image.shape == (HEIGHT, WIDTH, 3)
    assert abs(int(image[40, 40, 2]) - 0) < 10 and abs(int(image[4, 4, 0]) - 77) < 20  # BGR on disk


def test_preview_close_works_before_start_and_unknown_paths_are_404() -> None:
    never_started = PreviewServer(port=0)
    never_started.close()
    never_started.close()
    preview = PreviewServer(port=0)
    preview.start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", preview.port, timeout=5)
        connection.request("GET", "/etc/passwd")
        assert connection.getresponse().status == 404
        connection.close()
    finally:
        preview.close()


def _read_one_part(response: http.client.HTTPResponse) -> bytes:
    boundary = response.readline()
    assert boundary.strip() == b"--livefuseframe"
    headers = {}
    while (line := response.readline().strip()) != b"":
        name, value = line.decode().split(":", 1)
        headers[name.lower()] = value.strip()
    assert headers["content-type"] == "image/jpeg"
    return response.read(int(headers["content-length"]))
