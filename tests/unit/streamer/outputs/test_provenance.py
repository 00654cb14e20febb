import asyncio
import datetime
import fractions
import json
import logging
import threading
import time

import av
import numpy as np
import pytest

from gpu_ops.errors import InvalidInputError
from streamer.outputs.frame_stamp import STAMP_HEIGHT, STAMP_WIDTH, read_stamp, write_stamp
from streamer.outputs.provenance import audit_record, check_label, draw_label, label_box, log_audit
from streamer.realtime.batch_worker import BatchWorker
from streamer.realtime.worker_lane import InboundFrame, WorkerLane
from tests.fakes_pipeline import FakeSource, FakeStreamState, FakeSwapSettings, face_box, fake_binding


def _frame(width: int = 640, height: int = 480) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(60, 200, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize("size", [(640, 480), (1280, 720), (320, 240)])
def test_label_is_a_high_contrast_box_bottom_right_and_nothing_else_changes(size: tuple[int, int]) -> None:
    frame = _frame(*size)
    original = frame.copy()
    x1, y1, x2, y2 = draw_label(frame, "AI")
    width, height = size
    assert x1 > width // 2 and y1 > height // 2 and x2 <= width and y2 <= height
    changed = np.argwhere(np.any(frame != original, axis=2))
    assert changed[:, 0].min() >= y1 and changed[:, 0].max() < y2
    assert changed[:, 1].min() >= x1 and changed[:, 1].max() < x2
    box = frame[y1:y2, x1:x2]
    grey = box.mean(axis=2)
    assert (grey < 20).mean() > 0.4, "the box background is black"
    assert (grey > 235).sum() > 20, "the text and rim are white"
    assert (y2 - y1) >= 10


def test_label_leaves_the_stamp_strip_readable() -> None:
    frame = _frame()
    write_stamp(frame, 0xDEADBEEF)
    strip = frame[:STAMP_HEIGHT, :STAMP_WIDTH].copy()
    draw_label(frame, "AI GENERATED VIDEO")
    assert np.array_equal(frame[:STAMP_HEIGHT, :STAMP_WIDTH], strip)
    assert read_stamp(frame) == 0xDEADBEEF


def test_label_box_on_a_tiny_frame_avoids_the_stamp_strip_and_fits() -> None:
    x1, y1, x2, y2 = label_box("AI", 64, 40)
    assert 0 <= x1 <= x2 <= 64 and STAMP_HEIGHT <= y1 <= y2 <= 40
    frame = _frame(64, 40)
    draw_label(frame, "AI")  # no exception, stays inside the frame


@pytest.mark.parametrize("bad", ["", "x" * 33, "KI\u00e4", "line\nbreak"])
def test_label_must_be_short_printable_ascii(bad: str) -> None:
    with pytest.raises(InvalidInputError):
        check_label(bad)
    assert check_label("AI") == "AI"


def test_audit_line_is_structured_with_every_field(caplog: pytest.LogCaptureFixture) -> None:
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    record = audit_record(
        "source_set",
        "abc123",
        token_id="0badf00d",
        remote="127.0.0.1",
        source_sha256="f" * 64,
        engine="mesh",
        now=moment,
    )
    with caplog.at_level(logging.INFO, logger="streamer.outputs.provenance"):
        log_audit(record)
    (entry,) = caplog.records
    fields = {key: getattr(entry, key) for key in ("event", "action", "session_id", "token_id", "remote")}
    assert fields == {
        "event": "audit",
        "action": "source_set",
        "session_id": "abc123",
        "token_id": "0badf00d",
        "remote": "127.0.0.1",
    }
    assert entry.source_sha256 == "f" * 64 and entry.engine == "mesh"  # type: ignore[attr-defined]
    assert entry.time_utc == "2026-01-02T03:04:05.000+00:00"  # type: ignore[attr-defined]
    assert "0badf00d" in entry.getMessage() and json.dumps(entry.__dict__, default=str)


async def test_the_worker_labels_swapped_frames_after_the_swap() -> None:
    delivered: list[av.VideoFrame] = []
    done = threading.Event()

    def deliver(item: InboundFrame, output: av.VideoFrame) -> None:
        delivered.append(output)
        done.set()

    worker = BatchWorker(fake_binding(), label="AI")
    lane = WorkerLane("s", FakeStreamState(), FakeSwapSettings(), deliver)
    lane.source = FakeSource((200, 30, 30))
    rgb = np.full((480, 640, 3), 120, np.uint8)
    video_frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
    video_frame.pts, video_frame.time_base = 0, fractions.Fraction(1, 90_000)
    worker.start()
    try:
        worker.attach(lane)
        lane.mailbox.put(InboundFrame(video_frame, time.monotonic()))
        assert await asyncio.to_thread(done.wait, 5.0)
    finally:
        await worker.close()
    output = np.asarray(delivered[0].to_ndarray(format="rgb24"), dtype=np.uint8)
    x1, y1, x2, y2 = label_box("AI", 640, 480)
    assert output[y1 + 2 : y2 - 2, x1 + 2 : x2 - 2].mean() < 100, "the label box is there (dark, with text)"
    fx1, fy1, fx2, fy2 = face_box(output)
    assert output[(fy1 + fy2) // 2, (fx1 + fx2) // 2, 0] > 180, "and the swap under it"
    assert abs(int(output[5, 5, 0]) - 120) <= 3, "the rest of the frame is untouched"


def test_the_worker_refuses_an_undrawable_label() -> None:
    with pytest.raises(InvalidInputError):
        BatchWorker(fake_binding(), label="\u00fcber")
