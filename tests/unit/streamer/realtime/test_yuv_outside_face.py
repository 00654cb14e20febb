"""A swapped frame goes out as its decoded planes with only the changed boxes converted back, on the host
path and on the device path's CPU mirrors alike; a frame nothing changed is the decoded frame itself, never
converted; the label is converted where it was drawn."""

import asyncio
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from av import VideoFrame

import gpu_ops.i420_patch
from gpu_ops.i420_patch import changed_boxes, even_box
from streamer.outputs.provenance import draw_label
from streamer.realtime.batch_worker import BatchWorker
from streamer.realtime.device_frames import HostTransfers, planes_of_video_frame
from streamer.realtime.frame_conversion import (
    DeviceFrameConversion,
    FrameConversion,
    HostFrameConversion,
    Swscale,
)
from streamer.realtime.worker_lane import InboundFrame, WorkerLane
from tests.fakes_pipeline import FakePipeline, FakeSource, FakeStreamState, FakeSwapSettings, fake_binding

WIDTH, HEIGHT = 640, 480
FACES = ((slice(91, 263), slice(141, 287)), (slice(300, 411), slice(451, 583)))  # odd edges on purpose


def decoded_frame(media_dir: Path, width: int = WIDTH, height: int = HEIGHT) -> VideoFrame:
    image = cv2.imread(str(media_dir / "fr_two_people.jpg"), cv2.IMREAD_COLOR)
    assert image is not None
    rgb = np.ascontiguousarray(cv2.resize(image, (width, height))[..., ::-1], dtype=np.uint8)
    frame = VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
    frame.pts, frame.time_base = 6000, Fraction(1, 90000)
    return frame


def swapped(rgb: np.ndarray) -> np.ndarray:
    """What a swap does: a copy with the faces' boxes repainted."""
    output = rgb.copy()
    for rows, columns in FACES:
        output[rows, columns] = 255 - output[rows, columns]
    return output


def planes_copy(frame: VideoFrame) -> list[np.ndarray]:
    return [plane.copy() for plane in planes_of_video_frame(frame)]


def assert_decoder_bits_where_untouched(
    out: VideoFrame, decoded: list[np.ndarray], before: Any, after: Any
) -> None:
    changed = (before != after).any(axis=2)
    blocks = changed.reshape(HEIGHT // 2, 2, WIDTH // 2, 2).any(axis=(1, 3))
    y, u, v = planes_of_video_frame(out)
    np.testing.assert_array_equal(y[~changed], decoded[0][~changed])
    np.testing.assert_array_equal(u[~blocks], decoded[1][~blocks])
    np.testing.assert_array_equal(v[~blocks], decoded[2][~blocks])
    assert not np.array_equal(y[changed], decoded[0][changed])


CONVERSIONS: dict[str, Callable[[], FrameConversion]] = {
    "host": HostFrameConversion,
    "device mirror": lambda: DeviceFrameConversion(HostTransfers()),
}


@pytest.mark.parametrize("path", sorted(CONVERSIONS))
def test_only_the_faces_are_converted_back(media_dir: Path, path: str) -> None:
    conversion = CONVERSIONS[path]()
    like = decoded_frame(media_dir)
    decoded = planes_copy(like)
    rgb = conversion.to_pipeline("a", like)
    output = swapped(rgb)
    out = conversion.to_video_frame("a", output, like, source=rgb)
    assert out is not like and (out.pts, out.time_base) == (6000, Fraction(1, 90000))
    assert_decoder_bits_where_untouched(out, decoded, rgb, output)
    for kept, plane in zip(decoded, planes_of_video_frame(like)):
        np.testing.assert_array_equal(plane, kept)  # the decoded frame itself is left as it was
    back = out.to_ndarray(format="rgb24").astype(np.int16)
    for rows, columns in FACES:  # the faces came back as swapped (within the 4:2:0 round trip)
        inner = (slice(rows.start + 2, rows.stop - 2), slice(columns.start + 2, columns.stop - 2))
        assert np.abs(back[inner] - output[inner]).mean() < 3


def test_the_device_mirror_sends_the_host_paths_planes_in_one_copy_down(media_dir: Path) -> None:
    device, host = DeviceFrameConversion(HostTransfers()), HostFrameConversion()
    like = decoded_frame(media_dir)
    rgb = device.to_pipeline("a", like)
    output = swapped(rgb)
    x1, y1, x2, y2 = draw_label(output, "AI")
    by_device = device.to_video_frame("a", output, like, source=rgb, drawn=[(x1, y1, x2, y2)])
    by_host = host.to_video_frame("a", output, like, source=rgb, drawn=[(x1, y1, x2, y2)])
    for a, b in zip(planes_of_video_frame(by_device), planes_of_video_frame(by_host)):
        np.testing.assert_array_equal(a, b)
    assert (device.ledger.uploads, device.ledger.downloads) == (1, 1)  # DESIGN.md: one copy each way
    assert device.to_video_frame("a", rgb, like, source=rgb) is like
    assert device.ledger.downloads == 1  # an unchanged frame does not come down


class ConversionCounter:
    """Counts every RGB -> I420 conversion, whole-frame (libswscale) or of a box."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real_box, real_whole = gpu_ops.i420_patch.rgb_to_i420, Swscale.to_yuv420p

        def box(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real_box(*args, **kwargs)

        def whole(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real_whole(*args, **kwargs)

        monkeypatch.setattr(gpu_ops.i420_patch, "rgb_to_i420", box)
        monkeypatch.setattr(Swscale, "to_yuv420p", whole)


@pytest.mark.parametrize("path", sorted(CONVERSIONS))
def test_an_unchanged_frame_goes_out_as_decoded_and_is_never_converted(
    media_dir: Path, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = ConversionCounter(monkeypatch)
    conversion = CONVERSIONS[path]()
    like = decoded_frame(media_dir)
    rgb = conversion.to_pipeline("a", like)
    assert conversion.to_video_frame("a", rgb, like, source=rgb) is like  # the pipeline handed it back
    if path == "host":  # an equal copy is found unchanged too (the device would need a sync to know)
        assert conversion.to_video_frame("a", rgb.copy(), like, source=rgb) is like
    assert counter.calls == 0
    conversion.to_video_frame("a", swapped(rgb), like, source=rgb)
    if path == "host":
        assert counter.calls == len(changed_boxes(rgb, swapped(rgb))) == 2  # one conversion per face
    else:
        assert counter.calls == 1  # the device merges the whole frame by the same rule at once


@pytest.mark.parametrize("path", sorted(CONVERSIONS))
def test_a_label_drawn_over_the_decoded_picture_is_converted_where_it_was_drawn(
    media_dir: Path, path: str
) -> None:
    conversion = CONVERSIONS[path]()
    like = decoded_frame(media_dir)
    decoded = planes_copy(like)
    rgb = conversion.to_pipeline("a", like)
    x1, y1, x2, y2 = draw_label(rgb, "AI")  # in place, over the picture the pipeline was given
    out = conversion.to_video_frame("a", rgb, like, source=rgb, drawn=[(x1, y1, x2, y2)])
    box = even_box(x1, y1, x2, y2, WIDTH, HEIGHT)
    assert box is not None
    drawn = np.zeros((HEIGHT, WIDTH, 1), bool)
    drawn[box.top : box.bottom, box.left : box.right] = True  # the whole drawn box is converted
    assert_decoder_bits_where_untouched(out, decoded, drawn, ~drawn)
    back = out.to_ndarray(format="rgb24")[box.top : box.bottom, box.left : box.right].astype(np.int16)
    assert np.abs(back - rgb[box.top : box.bottom, box.left : box.right]).mean() < 4  # the label shows


def test_the_worker_sends_a_faceless_frame_as_decoded_without_converting(
    media_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = ConversionCounter(monkeypatch)
    delivered: list[tuple[InboundFrame, VideoFrame]] = []
    lanes = {
        "faceless": WorkerLane(
            "faceless", FakeStreamState(), FakeSwapSettings(), lambda i, f: delivered.append((i, f))
        ),
        "swapped": WorkerLane(
            "swapped", FakeStreamState(), FakeSwapSettings(), lambda i, f: delivered.append((i, f))
        ),
    }
    lanes["swapped"].source = FakeSource((255, 0, 0))  # the faceless lane has no source: the fake leaves it
    worker = BatchWorker(fake_binding(FakePipeline()), conversion=HostFrameConversion())

    async def run() -> None:
        worker.start()
        try:
            for lane in lanes.values():
                worker.attach(lane)
                lane.mailbox.put(InboundFrame(decoded_frame(media_dir), time.monotonic()))
            deadline = time.monotonic() + 10
            while len(delivered) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        finally:
            await worker.close()

    asyncio.run(run())
    as_decoded = [frame is item.video_frame for item, frame in delivered]
    assert sorted(as_decoded) == [False, True]  # the faceless frame is the decoder's own
    assert counter.calls == 1  # the swapped frame's one box; the faceless frame none
