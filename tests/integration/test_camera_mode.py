"""`run_stream.py camera` end to end, with a looped video file as the camera and a pyvirtualcam backend
registered here as the virtual camera (no kernel module on CI machines)."""

import hashlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import av
import cv2
import numpy as np
import pytest
import pyvirtualcam
from pyvirtualcam.util import encode_fourcc

import run_stream
from models.face import Frame
from streamer.outputs import camera
from streamer.outputs.camera_capture import CameraCapture, CameraDisconnectedError, CapturedFrame

REPO_ROOT = Path(__file__).resolve().parents[2]
CLIP_FRAMES = 30
STAMP_STEP = 8
BACKEND = "livefuse-integration"


class RecordingBackend:
    """Keeps every frame the virtual camera gets, with its arrival time."""

    instances: ClassVar[list["RecordingBackend"]] = []

    def __init__(
        self, *, width: int, height: int, fps: float, fourcc: int, device: str | None, **_: object
    ) -> None:
        self.width, self.height, self.fps, self.fourcc = width, height, fps, fourcc
        self.frames: list[np.ndarray] = []
        self.arrivals: list[float] = []
        RecordingBackend.instances.append(self)

    def send(self, frame: np.ndarray) -> None:
        self.frames.append(frame.copy())
        self.arrivals.append(time.monotonic())

    def close(self) -> None:
        pass

    def device(self) -> str:
        return "/dev/video-recording"

    def native_fourcc(self) -> int:
        return self.fourcc

    def images(self) -> list[np.ndarray]:
        return [frame.reshape(self.height, self.width, 3) for frame in self.frames]


@pytest.fixture
def recording_backend() -> Iterator[type[RecordingBackend]]:
    RecordingBackend.instances = []
    pyvirtualcam.register_backend(BACKEND, RecordingBackend)
    yield RecordingBackend
    pyvirtualcam.camera.BACKENDS.pop(BACKEND, None)


def write_stamped_clip(path: Path, fps: int = 30) -> Path:
    """Lossless 160x120 clip; frame i has red == i * STAMP_STEP everywhere."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 160, 120, "bgr0"
        for index in range(CLIP_FRAMES):
            image = np.zeros((120, 160, 3), np.uint8)
            image[..., 0] = index * STAMP_STEP
            video_frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            video_frame.pts = index
            container.mux(stream.encode(video_frame))
        container.mux(stream.encode(None))
    return path


def camera_args(device: Path | str, *extra: str) -> Namespace:
    return run_stream.build_parser().parse_args(
        ["camera", "--device", str(device), "--source", "unused.jpg", "--virtual-cam"]
        + ["--virtual-cam-backend", BACKEND, *extra]
    )


class StampingPipeline:
    """Stands in for the swap: writes the capture number into the top-left block, after `work_s`."""

    def __init__(self, work_s: float) -> None:
        self.work_s = work_s
        self.captured_at: dict[int, float] = {}

    def __call__(self, captured: CapturedFrame) -> Frame:
        time.sleep(self.work_s)
        self.captured_at[captured.index] = captured.captured_at
        output = captured.image.copy()
        output[:4, :4] = (captured.index & 0xFF, (captured.index >> 8) & 0xFF, 255)
        return output


def stamp_of(image: np.ndarray) -> int:
    return int(image[1, 1, 0]) | (int(image[1, 1, 1]) << 8)


def test_frames_reach_the_virtual_camera_in_order_at_its_rate(
    recording_backend: type[RecordingBackend], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = write_stamped_clip(tmp_path / "camera.mkv", fps=30)
    pipeline = StampingPipeline(work_s=0.005)
    monkeypatch.setattr(camera, "_pipeline_process", lambda _args: pipeline)
    fps, frames = 20, 40  # 2 s at the camera rate, fed by a 30 fps "camera"
    args = camera_args(clip, "--width", "128", "--height", "96", "--fps", str(fps), "--frames", str(frames))
    assert camera.run(args) == 0

    (backend,) = recording_backend.instances
    assert (backend.width, backend.height, backend.fps) == (128, 96, fps)
    assert backend.fourcc == encode_fourcc("raw ")  # RGB
    assert len(backend.frames) == frames
    assert all(frame.shape == (128 * 96 * 3,) and frame.dtype == np.uint8 for frame in backend.frames)
    stamps = [stamp_of(image) for image in backend.images()]
    assert stamps == sorted(stamps)  # in capture order; a repeat only when the worker was late
    assert len(set(stamps)) >= frames * 3 // 4
    for image, stamp in zip(backend.images(), stamps, strict=True):
        # the picture is the captured frame itself: capture n shows file frame (n - 1) mod CLIP_FRAMES
        assert int(image[48, 64, 0]) == ((stamp - 1) % CLIP_FRAMES) * STAMP_STEP
    mean_interval = (backend.arrivals[-1] - backend.arrivals[0]) / (frames - 1)
    assert mean_interval == pytest.approx(1 / fps, rel=0.2)


def test_a_slow_pipeline_drops_frames_instead_of_queueing_them(
    recording_backend: type[RecordingBackend], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = write_stamped_clip(tmp_path / "camera.mkv", fps=30)
    pipeline = StampingPipeline(work_s=0.15)  # ~7 fps of work for a 30 fps camera
    monkeypatch.setattr(camera, "_pipeline_process", lambda _args: pipeline)
    args = camera_args(clip, "--width", "160", "--height", "120", "--fps", "20", "--frames", "50")
    assert camera.run(args) == 0

    (backend,) = recording_backend.instances
    stamps = [stamp_of(image) for image in backend.images()]
    assert stamps == sorted(stamps)
    distinct = sorted(set(stamps))
    assert max(b - a for a, b in itertools.pairwise(distinct)) >= 3  # stale frames skipped
    ages = [arrival - pipeline.captured_at[stamp] for arrival, stamp in zip(backend.arrivals, stamps)]
    # queued frames would age by ~0.12 s per frame (6 s by the end); newest-frame reading keeps it flat
    assert max(ages) < 0.6


def test_a_camera_that_stops_ends_the_run_with_its_error(
    recording_backend: type[RecordingBackend], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = write_stamped_clip(tmp_path / "camera.mkv")
    monkeypatch.setattr(camera, "_pipeline_process", lambda _args: StampingPipeline(work_s=0.0))
    real_read = CameraCapture.read

    def read_then_unplug(self: CameraCapture, timeout: float | None = None) -> CapturedFrame | None:
        if self.captured >= 10:
            raise CameraDisconnectedError(f"camera {self.device} stopped delivering frames")
        return real_read(self, timeout)

    monkeypatch.setattr(CameraCapture, "read", read_then_unplug)
    args = camera_args(clip, "--width", "160", "--height", "120", "--fps", "30")
    with pytest.raises(CameraDisconnectedError, match="stopped delivering frames"):
        camera.run(args)
    assert len(recording_backend.instances[0].frames) >= 1
    assert not [thread for thread in threading.enumerate() if thread.name.startswith(("capture", "camera"))]


@pytest.mark.skipif(not Path("/dev").is_dir() or any(Path("/dev").glob("video*")), reason="has cameras")
def test_missing_camera_and_missing_loopback_device_are_one_line_errors(tmp_path: Path) -> None:
    clip = write_stamped_clip(tmp_path / "camera.mkv")
    base = [sys.executable, "run_stream.py", "--log-level", "ERROR", "camera", "--source", "face.jpg"]
    missing_camera = subprocess.run(
        [*base, "--device", "/dev/video99", "--virtual-cam"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing_camera.returncode == 2
    assert missing_camera.stderr.startswith("error: camera /dev/video99 not found (")
    assert missing_camera.stderr.count("\n") == 1

    missing_loopback = subprocess.run(
        [*base, "--device", str(clip), "--virtual-cam", "--virtual-cam-backend", "v4l2loopback"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing_loopback.returncode == 1
    assert missing_loopback.stderr.startswith("error: virtual camera unavailable: No v4l2 loopback device")
    assert "sudo modprobe v4l2loopback devices=1 video_nr=10" in missing_loopback.stderr
    assert missing_loopback.stderr.count("\n") == 1


def test_camera_mode_swaps_faces_of_a_looped_clip_with_the_real_pipeline(
    recording_backend: type[RecordingBackend], models_dir: Path, media_dir: Path
) -> None:
    from models.detector import Detector
    from models.inference import InferenceConfig
    from models.model_files import ModelStore

    clip = media_dir / "fr_short_hamilton_clip.mp4"  # 640x360: sent without resizing
    args = run_stream.build_parser().parse_args(
        ["camera", "--device", str(clip), "--source", str(media_dir / "fr_biden2.jpg"), "--virtual-cam"]
        + ["--virtual-cam-backend", BACKEND, "--models-dir", str(models_dir)]
        + ["--width", "640", "--height", "360", "--fps", "10", "--frames", "40"]
    )
    assert camera.run(args) == 0
    (backend,) = recording_backend.instances
    received = backend.images()
    assert len(received) == 40

    clip_frames = decode_all(clip)
    clip_digests = {hashlib.sha1(frame.tobytes()).digest() for frame in clip_frames}
    changed = [image for image in received if hashlib.sha1(image.tobytes()).digest() not in clip_digests]
    # a face is in most clip frames; frames without one pass through bit-exact
    assert len(changed) >= len(received) // 4, f"only {len(changed)} of {len(received)} frames were swapped"

    store = ModelStore(models_dir)
    detector = Detector(store.session("yunet_n", InferenceConfig()), store.spec("yunet_n"))
    thumbnails = np.stack([thumbnail(frame) for frame in clip_frames])
    in_face = 0
    for image in changed:
        original = clip_frames[int(np.argmin(np.abs(thumbnails - thumbnail(image)).sum(axis=(1, 2, 3))))]
        differs = np.abs(image.astype(np.int16) - original).max(axis=2) > 24
        ys, xs = np.nonzero(differs)
        if len(xs) == 0:
            continue
        assert differs.mean() < 0.25  # a face region changed, not the whole picture
        centre = (np.median(xs), np.median(ys))
        boxes = detector.detect(original).boxes
        if any(
            x1 - 10 <= centre[0] <= x2 + 10 and y1 - 10 <= centre[1] <= y2 + 10 for x1, y1, x2, y2 in boxes
        ):
            in_face += 1
    assert in_face >= len(changed) // 2, f"changed pixels inside a detected face in {in_face}/{len(changed)}"


def decode_all(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        container.streams.video[0].thread_type = "AUTO"
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def thumbnail(image: np.ndarray) -> np.ndarray:
    return cv2.resize(image, (64, 36), interpolation=cv2.INTER_AREA).astype(np.int32)


def test_sigint_stops_the_loop_cleanly(
    recording_backend: type[RecordingBackend], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = write_stamped_clip(tmp_path / "camera.mkv")
    monkeypatch.setattr(camera, "_pipeline_process", lambda _args: StampingPipeline(work_s=0.0))
    args = camera_args(clip, "--width", "160", "--height", "120", "--fps", "30")  # no --frames: runs until ^C
    first_frame = threading.Event()
    original_send = RecordingBackend.send

    def send_and_signal(self: RecordingBackend, frame: np.ndarray) -> None:
        original_send(self, frame)
        first_frame.set()

    monkeypatch.setattr(RecordingBackend, "send", send_and_signal)
    interrupter = threading.Thread(target=signal_after, args=(first_frame,), name="interrupter", daemon=True)
    interrupter.start()
    assert camera.run(args) == 0
    interrupter.join()
    assert len(recording_backend.instances[0].frames) >= 1
    assert not [thread for thread in threading.enumerate() if thread.name.startswith(("capture", "camera"))]


def signal_after(event: threading.Event) -> None:
    """Ctrl+C as a user would press it, once frames flow."""
    if event.wait(10):
        os.kill(os.getpid(), signal.SIGINT)
