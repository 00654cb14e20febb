"""Frame conversion in the worker: the device path (run here on its CPU mirrors through HostTransfers)
moves each frame across the "bus" exactly twice and gives the host path's pictures."""

import logging
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np
import pytest
from av import VideoFrame

from gpu_ops.colorspace import i420_to_rgb_cpu
from gpu_ops.errors import InvalidInputError
from streamer.pipeline.compute_backend import ComputeBackend
from streamer.realtime.device_frames import HostTransfers, planes_of_video_frame
from streamer.realtime.frame_conversion import (
    AV_COLOR_RANGE_FULL,
    AV_COLORSPACE_BT709,
    DeviceFrameConversion,
    HostFrameConversion,
    choose_frame_conversion,
)


def photo_frame(media_dir: Path, width: int, height: int) -> VideoFrame:
    image = cv2.imread(str(media_dir / "fr_two_people.jpg"), cv2.IMREAD_COLOR)
    assert image is not None
    rgb = np.ascontiguousarray(cv2.resize(image, (width, height))[..., ::-1], dtype=np.uint8)
    frame = VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
    frame.pts, frame.time_base = 3000, Fraction(1, 90000)
    return frame


def test_device_path_rgb_is_the_colour_kernels_and_close_to_libswscale(media_dir: Path) -> None:
    frame = photo_frame(media_dir, 640, 480)
    device = DeviceFrameConversion(HostTransfers()).to_pipeline("a", frame)
    assert device.shape == (480, 640, 3)
    assert np.array_equal(device, i420_to_rgb_cpu(*planes_of_video_frame(frame)))
    host = HostFrameConversion().to_pipeline("a", frame)
    difference = np.abs(device.astype(np.int16) - host.astype(np.int16))
    assert difference.mean() < 1.5  # swscale rounds its chroma differently; same picture
    assert np.percentile(difference, 99) <= 6


def test_padded_planes_are_uploaded_with_their_pitch_and_cross_twice(media_dir: Path) -> None:
    conversion = DeviceFrameConversion(HostTransfers())
    frame = photo_frame(media_dir, 100, 60)  # 100 px rows are padded in av's planes
    assert frame.planes[0].line_size > 100
    frames_sent = 5
    for _ in range(frames_sent):
        rgb = conversion.to_pipeline("a", frame)
        out = conversion.to_video_frame("a", rgb, frame)
    ledger = conversion.ledger
    assert (ledger.uploads, ledger.downloads, ledger.crossings) == (frames_sent, frames_sent, 2 * frames_sent)
    plane_bytes = sum(plane.line_size * plane.height for plane in frame.planes)
    assert ledger.upload_bytes == frames_sent * plane_bytes  # pitched rows as they came, not repacked
    assert ledger.download_bytes == frames_sent * 100 * 60 * 3 // 2  # packed I420 down
    assert out.format.name == "yuv420p" and (out.width, out.height) == (100, 60)
    assert out.pts == 3000
    for sent, received in zip(planes_of_video_frame(frame), planes_of_video_frame(out)):
        difference = np.abs(sent.astype(np.int16) - received.astype(np.int16))  # through RGB and back
        assert difference.mean() < 0.5 and np.percentile(difference, 99) <= 3


def test_round_trip_matches_the_host_path(media_dir: Path) -> None:
    frame = photo_frame(media_dir, 320, 240)
    device, host = DeviceFrameConversion(HostTransfers()), HostFrameConversion()
    by_device = device.to_video_frame("a", device.to_pipeline("a", frame), frame).to_ndarray(format="rgb24")
    by_host = host.to_video_frame("a", host.to_pipeline("a", frame), frame).to_ndarray(format="rgb24")
    assert np.abs(by_device.astype(np.int16) - by_host.astype(np.int16)).mean() < 2.0


def test_tagged_bt709_full_range_frames_use_their_own_matrix(media_dir: Path) -> None:
    frame = photo_frame(media_dir, 64, 48)
    frame.colorspace, frame.color_range = AV_COLORSPACE_BT709, AV_COLOR_RANGE_FULL
    rgb = DeviceFrameConversion(HostTransfers()).to_pipeline("a", frame)
    planes = planes_of_video_frame(frame)
    assert np.array_equal(rgb, i420_to_rgb_cpu(*planes, colorspace="bt709", full_range=True))
    assert not np.array_equal(rgb, i420_to_rgb_cpu(*planes))


@pytest.mark.parametrize(
    "frame",
    [
        VideoFrame.from_ndarray(np.full((75, 101, 3), 90, np.uint8), format="rgb24").reformat(
            format="yuv420p"
        ),
        VideoFrame.from_ndarray(np.full((48, 64, 3), 90, np.uint8), format="rgb24"),  # not planar
    ],
    ids=["odd_size", "rgb24"],
)
def test_frames_without_even_i420_planes_still_convert_and_are_counted(
    frame: VideoFrame, caplog: pytest.LogCaptureFixture
) -> None:
    conversion = DeviceFrameConversion(HostTransfers())
    with caplog.at_level(logging.WARNING):
        rgb = conversion.to_pipeline("a", frame)
        conversion.to_pipeline("a", frame)
    assert rgb.shape == (frame.height, frame.width, 3)
    assert np.abs(rgb.astype(np.int16) - 90).max() <= 2
    out = conversion.to_video_frame("a", rgb, frame)
    assert (out.width, out.height) == (frame.width, frame.height) and out.format.name == "yuv420p"
    assert conversion.ledger.uploads == 2 and conversion.ledger.downloads == 1
    assert sum("converted on the host" in record.message for record in caplog.records) == 1  # warned once


def test_sessions_keep_their_own_buffers_until_forgotten(media_dir: Path) -> None:
    conversion = DeviceFrameConversion(HostTransfers())
    small, large = photo_frame(media_dir, 64, 48), photo_frame(media_dir, 128, 96)
    a = conversion.to_pipeline("a", small)
    b = conversion.to_pipeline("b", large)
    assert a.shape == (48, 64, 3) and b.shape == (96, 128, 3)
    assert conversion.to_pipeline("a", small).shape == (48, 64, 3)
    conversion.forget("a")
    conversion.forget("never-seen")  # harmless
    assert conversion.to_pipeline("a", large).shape == (96, 128, 3)


def test_frame_path_choice_follows_the_backend() -> None:
    cpu = ComputeBackend("numpy", "cpu", "CPU requested")
    assert isinstance(choose_frame_conversion("auto", cpu), HostFrameConversion)
    assert isinstance(choose_frame_conversion("auto", None), HostFrameConversion)
    assert isinstance(choose_frame_conversion("host", cpu), HostFrameConversion)
    mirror = choose_frame_conversion("device", cpu)
    assert isinstance(mirror, DeviceFrameConversion) and mirror.describe() == "device (numpy mirror)"
    with pytest.raises(InvalidInputError, match="frame path"):
        choose_frame_conversion("gpu", cpu)  # type: ignore[arg-type]


def test_host_path_keeps_its_contexts_and_gives_pyavs_pixels(media_dir: Path) -> None:
    """Kept swscale contexts (one pair per session, one slice thread) change nothing in the pictures:
    the same pixels as PyAV's per-frame conversions, for sessions of different sizes side by side and
    for a tagged BT.709 full-range frame."""
    conversion = HostFrameConversion()
    tagged = photo_frame(media_dir, 64, 48)
    tagged.colorspace, tagged.color_range = AV_COLORSPACE_BT709, AV_COLOR_RANGE_FULL
    frames = {"a": photo_frame(media_dir, 320, 240), "b": photo_frame(media_dir, 100, 60), "c": tagged}
    for _ in range(2):
        for session_id, frame in frames.items():
            rgb = conversion.to_pipeline(session_id, frame)
            assert np.array_equal(rgb, frame.to_ndarray(format="rgb24"))
            out = conversion.to_video_frame(session_id, rgb, frame)
            expected = VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
            assert out.pts == frame.pts and out.time_base == frame.time_base
            for got, want in zip(planes_of_video_frame(out), planes_of_video_frame(expected)):
                assert np.array_equal(got, want)
    conversion.forget("a")
    assert np.array_equal(conversion.to_pipeline("a", frames["a"]), frames["a"].to_ndarray(format="rgb24"))
