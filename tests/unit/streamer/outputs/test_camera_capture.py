"""Camera capture: frame fitting, device names, clear errors, newest-frame reading of a looped file."""

import errno
import platform
import time
from pathlib import Path

import av
import numpy as np
import pytest

from gpu_ops.errors import InvalidInputError
from streamer.outputs import camera_capture
from streamer.outputs.camera_capture import (
    CameraBusyError,
    CameraCapture,
    CameraNotFoundError,
    camera_input,
    fit_frame,
    open_capture,
)

CLIP_FRAMES = 6
STAMP_STEP = 40


def write_stamped_clip(
    path: Path, *, frames: int = CLIP_FRAMES, fps: int = 60, size: tuple[int, int] = (64, 48)
) -> Path:
    """A lossless clip whose frame i has red == i * STAMP_STEP (mod 256) everywhere: order can be read back."""
    width, height = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "bgr0"
        for index in range(frames):
            image = np.zeros((height, width, 3), np.uint8)
            image[..., 0] = (index * STAMP_STEP) % 256
            video_frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            video_frame.pts = index
            container.mux(stream.encode(video_frame))
        container.mux(stream.encode(None))
    return path


def test_fit_frame_returns_the_same_array_when_the_size_matches() -> None:
    image = np.zeros((48, 64, 3), np.uint8)
    assert fit_frame(image, 64, 48) is image


def test_fit_frame_crops_the_sides_of_a_wide_frame() -> None:
    image = np.zeros((100, 300, 3), np.uint8)
    image[:, :100] = (255, 0, 0)  # left third red, centre green, right third blue
    image[:, 100:200] = (0, 255, 0)
    image[:, 200:] = (0, 0, 255)
    fitted = fit_frame(image, 50, 50)
    assert fitted.shape == (50, 50, 3) and fitted.flags["C_CONTIGUOUS"]
    assert np.all(fitted[:, 5:45] == (0, 255, 0))


def test_fit_frame_crops_top_and_bottom_of_a_tall_frame_and_scales_up() -> None:
    image = np.zeros((90, 40, 3), np.uint8)
    image[:30] = 200
    image[30:60] = 100
    image[60:] = 0
    fitted = fit_frame(image, 160, 120)  # 4:3 from 40x90: the middle 40x30 band, scaled x4
    assert fitted.shape == (120, 160, 3)
    assert np.all(fitted[8:112] == 100)


def test_camera_input_per_system() -> None:
    assert camera_input("0", "Linux") == ("/dev/video0", "v4l2")
    assert camera_input("/dev/video2", "Linux") == ("/dev/video2", "v4l2")
    assert camera_input("0", "Darwin") == ("0", "avfoundation")
    assert camera_input("Integrated Camera", "Windows") == ("video=Integrated Camera", "dshow")
    with pytest.raises(CameraNotFoundError, match="no camera input"):
        camera_input("0", "Plan9")


@pytest.mark.skipif(platform.system() != "Linux", reason="v4l2 device paths are Linux only")
def test_missing_camera_is_a_clear_error() -> None:
    with pytest.raises(CameraNotFoundError, match=r"^camera /dev/video99 not found \(") as raised:
        CameraCapture("/dev/video99", width=640, height=480, fps=30)
    assert "\n" not in str(raised.value)
    assert raised.value.exit_code == 2


def test_busy_camera_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def busy_open(url: str, **_options: object) -> None:
        av.error.err_check(-errno.EBUSY, url)

    monkeypatch.setattr(camera_capture.av, "open", busy_open)
    with pytest.raises(CameraBusyError, match="busy: another program is using it"):
        open_capture("0", width=640, height=480, fps=30)


def test_camera_rejecting_the_mode_is_opened_in_its_default_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, object]] = []

    def picky_open(url: str, **options: object) -> str:
        calls.append(options)
        if "options" in options:
            av.error.err_check(-errno.EINVAL, url)
        return "container"

    monkeypatch.setattr(camera_capture.av, "open", picky_open)
    assert open_capture("0", width=1280, height=720, fps=30) == "container"
    assert calls[0]["options"] == {"video_size": "1280x720", "framerate": "30"}
    assert "options" not in calls[1]


def test_file_that_does_not_decode_is_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"this is not a video" * 100)
    with pytest.raises(InvalidInputError, match="broken.mp4: not a readable video file"):
        CameraCapture(str(broken), width=64, height=48, fps=30)


def test_file_without_video_is_a_clear_error(tmp_path: Path) -> None:
    sound = tmp_path / "sound.wav"
    with av.open(str(sound), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=8000)
        samples = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
        samples.sample_rate = 8000
        container.mux(stream.encode(samples))
        container.mux(stream.encode(None))
    with pytest.raises(InvalidInputError, match="no video stream"):
        CameraCapture(str(sound), width=64, height=48, fps=30)


def test_looped_file_is_read_in_order_across_loops(tmp_path: Path) -> None:
    clip = write_stamped_clip(tmp_path / "stamped.mkv")
    capture = CameraCapture(str(clip), width=32, height=24, fps=60)
    capture.start()
    try:
        read = []
        while capture.loops < 2:
            frame = capture.read(timeout=2.0)
            assert frame is not None
            read.append(frame)
    finally:
        capture.close()
    indices = [frame.index for frame in read]
    assert indices == sorted(set(indices))  # strictly increasing: nothing stale, nothing twice
    for frame in read:
        assert frame.image.shape == (24, 32, 3) and frame.image.dtype == np.uint8
        # capture number n is file frame (n - 1) mod CLIP_FRAMES: the loop keeps the file's order
        assert int(frame.image[12, 16, 0]) == ((frame.index - 1) % CLIP_FRAMES) * STAMP_STEP
    assert capture.captured >= 2 * CLIP_FRAMES


def test_a_slow_reader_gets_the_newest_frame_and_drops_are_counted(tmp_path: Path) -> None:
    clip = write_stamped_clip(tmp_path / "stamped.mkv", frames=30, fps=100)
    capture = CameraCapture(str(clip), width=64, height=48, fps=100)
    capture.start()
    try:
        first = capture.read(timeout=2.0)
        assert first is not None
        deadline = time.monotonic() + 10.0
        while capture.captured < first.index + 5:  # frames arrive unread; only the newest may be returned
            assert time.monotonic() < deadline, f"only {capture.captured} frames captured"
            time.sleep(0.01)
        captured_before = capture.captured
        newest = capture.read(timeout=2.0)
    finally:
        capture.close()
    assert first is not None and newest is not None
    assert newest.index >= captured_before > first.index + 1
    assert capture.dropped >= captured_before - first.index - 1


def test_close_is_idempotent_and_works_before_start(tmp_path: Path) -> None:
    clip = write_stamped_clip(tmp_path / "stamped.mkv")
    never_started = CameraCapture(str(clip), width=64, height=48, fps=30)
    never_started.close()
    never_started.close()
    started = CameraCapture(str(clip), width=64, height=48, fps=30)
    started.start()
    assert started.read(timeout=2.0) is not None
    started.close()
    started.close()
    assert started.read(timeout=0.1) is None
