"""DeviceFrames on the NumPy mirror: one upload + one download per frame, pitches kept, ring reuse."""

from typing import Any

import av
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.colorspace import i420_to_rgb, rgb_to_i420
from gpu_ops.errors import InvalidFrameError
from streamer.realtime.device_frames import (
    CopyEvent,
    DeviceFrames,
    HostTransfers,
    I420Planes,
    PlaneLayout,
    planes_of_video_frame,
)


class RecordingTransfers(HostTransfers):
    """The NumPy mirror, logging every call so the call pattern can be asserted."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def pinned_host(self, nbytes: int) -> NDArray[np.uint8]:
        self.calls.append(("pinned_host", nbytes))
        return super().pinned_host(nbytes)

    def device_buffer(self, nbytes: int) -> NDArray[np.uint8]:
        self.calls.append(("device_buffer", nbytes))
        return super().device_buffer(nbytes)

    def host_to_device(self, host: NDArray[np.uint8], device: Any) -> None:
        self.calls.append(("host_to_device", host.nbytes))
        super().host_to_device(host, device)

    def device_to_host(self, device: Any, host: NDArray[np.uint8]) -> None:
        self.calls.append(("device_to_host", host.nbytes))
        super().device_to_host(device, host)

    def record_event(self) -> CopyEvent:
        number = sum(1 for name, _ in self.calls if name == "record_event")
        self.calls.append(("record_event", number))
        calls = self.calls

        class Event:
            def synchronize(self) -> None:
                calls.append(("wait_event", number))

        return Event()

    def copies(self) -> list[tuple[str, int]]:
        return [call for call in self.calls if call[0] in ("host_to_device", "device_to_host")]


def padded_planes(width: int, height: int, pad: int, seed: int) -> I420Planes:
    """Random I420 planes as views into wider buffers (like a decoder's line_size > width)."""
    rng = np.random.default_rng(seed)
    planes = []
    for rows, columns in ((height, width), (height // 2, width // 2), (height // 2, width // 2)):
        backing = rng.integers(0, 256, (rows, columns + pad), dtype=np.uint8)
        planes.append(backing[:, :columns])
    return I420Planes(*planes)


def test_upload_keeps_pitches_and_copies_once() -> None:
    transfers = RecordingTransfers()
    frames = DeviceFrames(transfers)
    planes = padded_planes(64, 32, pad=32, seed=0)
    device = frames.upload(planes)
    for sent, received in zip(planes, device):
        np.testing.assert_array_equal(received, sent)
        assert received.strides == sent.strides  # pitched views, not repacked
    expected_bytes = 32 * 96 + 2 * 16 * 64
    assert transfers.copies() == [("host_to_device", expected_bytes)]
    assert frames.ledger.uploads == 1 and frames.ledger.upload_bytes == expected_bytes


def test_a_frame_crosses_the_bus_exactly_twice() -> None:
    transfers = RecordingTransfers()
    frames = DeviceFrames(transfers)
    width, height = 64, 48
    for index in range(5):
        planes = padded_planes(width, height, pad=16, seed=index)
        rgb = i420_to_rgb(*frames.upload(planes))
        rgb[10:20, 10:20] = 255  # "the swap"
        out = frames.download(I420Planes(*rgb_to_i420(rgb)))
        frames.finish()
        for received, expected in zip(out, rgb_to_i420(rgb)):
            np.testing.assert_array_equal(received, expected)
    copies = transfers.copies()
    assert [name for name, _ in copies] == ["host_to_device", "device_to_host"] * 5
    assert frames.ledger.crossings == 10
    assert frames.ledger.download_bytes == 5 * width * height * 3 // 2
    allocations = [call for call in transfers.calls if call not in copies and "event" not in call[0]]
    assert len(allocations) == 2 + 1 + DeviceFrames(HostTransfers()).ring_size  # only on the first frame


def test_download_ring_keeps_the_previous_frame_intact() -> None:
    frames = DeviceFrames(HostTransfers(), ring_size=2)
    first = np.full((8, 8, 3), 10, dtype=np.uint8)
    second = np.full((8, 8, 3), 200, dtype=np.uint8)
    held = frames.download(I420Planes(*rgb_to_i420(first)))
    held_copy = [plane.copy() for plane in held]
    latest = frames.download(I420Planes(*rgb_to_i420(second)))
    for plane, before in zip(held, held_copy):  # the encoder's frame was not overwritten
        np.testing.assert_array_equal(plane, before)
    assert not np.shares_memory(held.y, latest.y)
    third = frames.download(I420Planes(*rgb_to_i420(first)))
    assert np.shares_memory(third.y, held.y)  # slot reused ring_size downloads later


def test_layout_change_reallocates() -> None:
    transfers = RecordingTransfers()
    frames = DeviceFrames(transfers)
    frames.upload(padded_planes(32, 16, pad=0, seed=1))
    frames.upload(padded_planes(32, 16, pad=0, seed=2))
    frames.upload(padded_planes(64, 32, pad=0, seed=3))
    assert [name for name, _ in transfers.calls].count("pinned_host") == 2


def test_bad_planes_are_refused() -> None:
    frames = DeviceFrames(HostTransfers())
    y = np.zeros((15, 16), dtype=np.uint8)
    with pytest.raises(InvalidFrameError):
        frames.upload(I420Planes(y, np.zeros((7, 8), np.uint8), np.zeros((7, 8), np.uint8)))
    with pytest.raises(InvalidFrameError):
        DeviceFrames(HostTransfers(), ring_size=1)


def test_video_frame_planes_are_pitched_views() -> None:
    rng = np.random.default_rng(4)
    rgb = rng.integers(0, 256, (36, 50, 3), dtype=np.uint8)
    video_frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
    planes = planes_of_video_frame(video_frame)
    assert planes.y.shape == (36, 50) and planes.u.shape == (18, 25)
    packed = video_frame.to_ndarray()  # [h*3/2, w] I420 packed by PyAV
    np.testing.assert_array_equal(planes.y, packed[:36])
    assert PlaneLayout.of(planes).pitches[0] == video_frame.planes[0].line_size


def test_odd_sized_video_frame_is_refused() -> None:
    planes = planes_of_video_frame(av.VideoFrame(width=51, height=36, format="yuv420p"))
    with pytest.raises(InvalidFrameError, match="even-sized"):
        PlaneLayout.of(planes)


def test_staging_is_rewritten_only_after_its_previous_upload_completed() -> None:
    transfers = RecordingTransfers()
    frames = DeviceFrames(transfers)
    for seed in range(3):
        frames.upload(padded_planes(32, 16, pad=8, seed=seed))
    pattern = [
        call for call in transfers.calls if call[0] in ("host_to_device", "record_event", "wait_event")
    ]
    assert [name for name, _ in pattern] == [
        "host_to_device", "record_event",
        "wait_event", "host_to_device", "record_event",
        "wait_event", "host_to_device", "record_event",
    ]  # fmt: skip
    assert [number for name, number in pattern if name == "wait_event"] == [0, 1]
