"""`run_stream.py swap` end to end with the real models: images, video with audio, and every bad input."""

import os
import pty
import shutil
import struct
import subprocess
import sys
import threading
import zlib
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from models.downloader import ProgressBar
from tests.conftest import REPO_ROOT


def _swap(*args: str | Path, models_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "run_stream.py", "swap", "--models-dir", str(models_dir), *map(str, args)]
    return subprocess.run(command, check=False, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)


def _error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def _write_clip(path: Path, frames: list[np.ndarray], *, audio: bool) -> None:
    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=10)
        video.width, video.height = frames[0].shape[1], frames[0].shape[0]
        video.pix_fmt = "yuv420p"
        sound = container.add_stream("aac", rate=16000) if audio else None
        for index, frame in enumerate(frames):
            out = av.VideoFrame.from_ndarray(frame, format="rgb24")
            out.pts = index
            out.time_base = Fraction(1, 10)
            container.mux(video.encode(out))
        container.mux(video.encode(None))
        if sound is not None:
            samples = (np.sin(np.arange(16000) * 2 * np.pi * 440 / 16000) * 0.3).astype(np.float32)
            audio_frame = av.AudioFrame.from_ndarray(samples[None, :], format="flt", layout="mono")
            audio_frame.sample_rate = 16000
            audio_frame.pts = 0
            container.mux(sound.encode(audio_frame))
            container.mux(sound.encode(None))


def _read(path: Path) -> np.ndarray:
    image = cv2.imread(str(path))
    assert image is not None, f"cannot read {path}"
    return image


def _photo(media_dir: Path, name: str, width: int = 320) -> np.ndarray:
    image = cv2.cvtColor(_read(media_dir / name), cv2.COLOR_BGR2RGB)
    return cv2.resize(image, (width, int(image.shape[0] * width / image.shape[1]) // 2 * 2))


def test_image_swap_changes_only_the_face(models_dir: Path, media_dir: Path, tmp_path: Path) -> None:
    output = tmp_path / "out.png"
    target = media_dir / "fr_obama.jpg"
    result = _swap(
        "--source", media_dir / "fr_biden2.jpg", "--target", target, "--output", output, models_dir=models_dir
    )
    assert result.returncode == 0, result.stderr
    before = _read(target)
    after = _read(output)
    changed = np.any(before != after, axis=2)
    ys, xs = np.nonzero(changed)
    assert changed.sum() > 5000  # the face really changed
    # the manifest's face box is [371,85,607,421]: every changed pixel sits around it
    assert xs.min() > 300 and xs.max() < 680 and ys.min() > 20 and ys.max() < 520


def test_video_swap_keeps_frames_and_audio(models_dir: Path, media_dir: Path, tmp_path: Path) -> None:
    face = _photo(media_dir, "fr_obama.jpg")
    frames = [np.roll(face, shift, axis=1) for shift in range(0, 24, 2)]
    clip = tmp_path / "clip.mp4"
    _write_clip(clip, frames, audio=True)
    output = tmp_path / "swapped.mp4"
    result = _swap(
        "--source", media_dir / "fr_biden2.jpg", "--target", clip, "--output", output, models_dir=models_dir
    )
    assert result.returncode == 0, result.stderr
    with av.open(str(output)) as container:
        assert container.streams.audio, "the target's audio must be kept"
        decoded = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    assert len(decoded) == len(frames)
    difference = np.abs(decoded[5].astype(int) - frames[5].astype(int)).mean(axis=2)
    assert (difference > 40).sum() > 500  # beyond codec noise: the face was swapped


def _warnings(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if " WARNING " in line]


def test_target_without_face_is_written_unchanged(models_dir: Path, media_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "wall.png"
    cv2.imwrite(str(target), np.full((240, 320, 3), 120, np.uint8))
    output = tmp_path / "out.png"
    result = _swap(
        "--source", media_dir / "fr_biden2.jpg", "--target", target, "--output", output, models_dir=models_dir
    )
    assert result.returncode == 0, result.stderr
    warnings = _warnings(result)
    assert len(warnings) == 1 and "wall.png" in warnings[0] and "no face" in warnings[0], result.stderr
    assert np.array_equal(_read(output), _read(target))


def test_video_target_without_face_says_so(models_dir: Path, media_dir: Path, tmp_path: Path) -> None:
    clip = tmp_path / "wall.mp4"
    _write_clip(clip, [np.full((240, 320, 3), 120 + index, np.uint8) for index in range(6)], audio=False)
    result = _swap(
        "--source",
        media_dir / "fr_biden2.jpg",
        "--target",
        clip,
        "--output",
        tmp_path / "out.mp4",
        models_dir=models_dir,
    )
    assert result.returncode == 0, result.stderr
    warnings = _warnings(result)
    assert len(warnings) == 1 and "wall.mp4" in warnings[0] and "any of its 6 frames" in warnings[0], warnings


def _clip_of_a_face(media_dir: Path, tmp_path: Path) -> Path:
    face = _photo(media_dir, "fr_obama.jpg")
    clip = tmp_path / "clip.mp4"
    _write_clip(clip, [np.roll(face, shift, axis=1) for shift in range(0, 16, 2)], audio=False)
    return clip


def test_video_progress_is_plain_lines_off_a_terminal(
    models_dir: Path, media_dir: Path, tmp_path: Path
) -> None:
    clip = _clip_of_a_face(media_dir, tmp_path)
    result = _swap(
        "--source",
        media_dir / "fr_biden2.jpg",
        "--target",
        clip,
        "--output",
        tmp_path / "out.mp4",
        models_dir=models_dir,
    )
    assert result.returncode == 0, result.stderr
    progress = [line for line in result.stderr.splitlines() if line.startswith("swap clip.mp4: ")]
    assert progress and progress[-1].startswith("swap clip.mp4: 100.0% 8/8 frames"), result.stderr
    assert "\r" not in result.stderr and "[#" not in result.stderr  # a log file gets no redraws


def test_video_progress_is_a_bar_on_a_terminal(models_dir: Path, media_dir: Path, tmp_path: Path) -> None:
    clip = _clip_of_a_face(media_dir, tmp_path)
    command = [sys.executable, "run_stream.py", "swap", "--models-dir", str(models_dir)]
    command += ["--source", str(media_dir / "fr_biden2.jpg"), "--target", str(clip)]
    command += ["--output", str(tmp_path / "out.mp4")]
    controller, terminal = pty.openpty()
    chunks: list[bytes] = []

    def read_terminal() -> None:
        while True:
            try:
                data = os.read(controller, 4096)
            except OSError:  # EIO: the child closed its side
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        process = subprocess.run(
            command, check=False, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=terminal, timeout=240
        )
    finally:
        os.close(terminal)
        reader.join(timeout=10)
        os.close(controller)
    shown = b"".join(chunks).decode(errors="replace")
    assert process.returncode == 0, shown
    assert "\r" in shown, shown  # redrawn in place
    final = shown.replace("\r\n", "\n").split("\r")[-1]
    bar = "[" + "#" * ProgressBar.BAR_WIDTH + "]"
    assert final.startswith(f"swap clip.mp4 {bar} 100.0% 8/8 frames"), shown


def test_source_without_face_exits_2(models_dir: Path, media_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "wall.jpg"
    cv2.imwrite(str(source), np.full((240, 320, 3), 120, np.uint8))
    result = _swap(
        "--source",
        source,
        "--target",
        media_dir / "fr_obama.jpg",
        "--output",
        tmp_path / "o.png",
        models_dir=models_dir,
    )
    assert result.returncode == 2
    errors = _error_lines(result)
    assert len(errors) == 1 and "no face" in errors[0], result.stderr
    assert str(source) in errors[0] and "Use a photo where one face is clearly visible" in errors[0]
    assert "Traceback" not in result.stderr


def _png_bomb() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    "name,content,expected",
    [
        ("truncated.jpg", "truncated-jpeg", "truncated JPEG"),
        ("bomb.png", "png-bomb", "pixels"),
        ("notes.jpg", "text", "not a JPEG, PNG or WebP"),
    ],
)
def test_bad_source_images_give_one_line(
    name: str, content: str, expected: str, models_dir: Path, media_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / name
    if content == "truncated-jpeg":
        data = (media_dir / "fr_obama.jpg").read_bytes()
        path.write_bytes(data[: len(data) // 3])
    elif content == "png-bomb":
        path.write_bytes(_png_bomb())
    else:
        path.write_text("just some text\n")
    result = _swap(
        "--source",
        path,
        "--target",
        media_dir / "fr_obama.jpg",
        "--output",
        tmp_path / "o.png",
        models_dir=models_dir,
    )
    assert result.returncode == 2, result.stderr
    errors = _error_lines(result)
    assert len(errors) == 1 and expected in errors[0] and name in errors[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("kind", ["empty-file", "no-frames"])
def test_empty_video_target_is_a_clear_error(
    kind: str, models_dir: Path, media_dir: Path, tmp_path: Path
) -> None:
    target = tmp_path / "empty.mp4"
    if kind == "empty-file":
        target.write_bytes(b"")
    else:
        with av.open(str(target), "w") as container:
            container.add_stream("libx264", rate=10)
    output = tmp_path / "out.mp4"
    result = _swap(
        "--source", media_dir / "fr_biden2.jpg", "--target", target, "--output", output, models_dir=models_dir
    )
    assert result.returncode == 2, result.stderr
    assert len(_error_lines(result)) == 1 and "Traceback" not in result.stderr
    assert not output.exists()


def test_unknown_output_format(models_dir: Path, media_dir: Path, tmp_path: Path) -> None:
    result = _swap(
        "--source",
        media_dir / "fr_biden2.jpg",
        "--target",
        media_dir / "fr_obama.jpg",
        "--output",
        tmp_path / "o.xyz",
        models_dir=models_dir,
    )
    assert result.returncode == 2
    assert "unknown image format" in _error_lines(result)[0]


def test_wrong_hash_model_names_the_fix(models_dir: Path, media_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "models"
    broken.mkdir()
    for name in ("det_yunet_n_dynamic.onnx", "lmk_mediapipe_facemesh_468.onnx", "emb_dlib_resnet_v1.onnx"):
        shutil.copy(models_dir / name, broken / name)
    corrupt = bytearray((broken / "det_yunet_n_dynamic.onnx").read_bytes())
    corrupt[1000] ^= 0xFF
    (broken / "det_yunet_n_dynamic.onnx").write_bytes(bytes(corrupt))
    result = _swap(
        "--source",
        media_dir / "fr_biden2.jpg",
        "--target",
        media_dir / "fr_obama.jpg",
        "--output",
        tmp_path / "o.png",
        models_dir=broken,
    )
    assert result.returncode != 0
    errors = _error_lines(result)
    assert len(errors) == 1 and "sha256" in errors[0] and "fetch" in errors[0]
    assert "Traceback" not in result.stderr


def test_missing_models_dir_names_the_fix(media_dir: Path, tmp_path: Path) -> None:
    result = _swap(
        "--source",
        media_dir / "fr_biden2.jpg",
        "--target",
        media_dir / "fr_obama.jpg",
        "--output",
        tmp_path / "o.png",
        models_dir=tmp_path / "nowhere",
    )
    assert result.returncode != 0
    errors = _error_lines(result)
    assert len(errors) == 1 and ("models fetch" in errors[0] or "--models-dir" in errors[0])
