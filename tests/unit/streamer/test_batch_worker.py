import asyncio
import fractions
import threading
import time

import av
import numpy as np
import pytest

from streamer.batch_worker import BatchWorker, InboundFrame, WorkerLane
from streamer.metrics import DaemonMetrics
from tests.fakes_pipeline import (
    FakePipeline,
    FakeSource,
    FakeStreamState,
    FakeSwapSettings,
    face_box,
    fake_binding,
)


def _inbound(pts: int, value: int = 100) -> InboundFrame:
    frame = av.VideoFrame.from_ndarray(np.full((120, 160, 3), value, np.uint8), format="rgb24")
    frame.pts = pts
    frame.time_base = fractions.Fraction(1, 90000)
    return InboundFrame(frame, time.monotonic())


class Collector:
    def __init__(self, expected: int) -> None:
        self.items: list[tuple[InboundFrame, av.VideoFrame]] = []
        self.done = threading.Event()
        self.expected = expected

    def __call__(self, item: InboundFrame, output: av.VideoFrame) -> None:
        self.items.append((item, output))
        if len(self.items) >= self.expected:
            self.done.set()


async def _wait(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, 5.0), "timed out"


async def test_newest_frame_of_every_lane_goes_in_one_batch() -> None:
    pipeline = FakePipeline(delay_s=0.2)
    worker = BatchWorker(fake_binding(pipeline), DaemonMetrics())
    collectors = [Collector(2), Collector(1)]
    lanes = [WorkerLane(f"s{i}", FakeStreamState(), FakeSwapSettings(), collectors[i]) for i in range(2)]
    lanes[0].source = FakeSource((255, 0, 0))
    worker.start()
    try:
        for lane in lanes:
            worker.attach(lane)
        lanes[0].mailbox.put(_inbound(0))
        await asyncio.sleep(0.05)  # the first batch (one frame) is now sleeping in the pipeline
        for lane in lanes:
            for pts in (3000, 6000, 9000):
                lane.mailbox.put(_inbound(pts))
        await _wait(collectors[0].done)
        await _wait(collectors[1].done)
    finally:
        await worker.close()
    assert pipeline.batch_sizes[:2] == [1, 2]
    assert [item.video_frame.pts for item, _ in collectors[0].items] == [0, 9000]  # 3000, 6000 dropped
    assert lanes[0].mailbox.dropped == 2
    swapped = collectors[0].items[1][1]
    assert (swapped.pts, swapped.time_base) == (9000, fractions.Fraction(1, 90000))
    x1, y1, x2, y2 = face_box(np.zeros((120, 160, 3), np.uint8))
    rgb = swapped.to_ndarray(format="rgb24")
    assert abs(int(rgb[(y1 + y2) // 2, (x1 + x2) // 2, 0]) - 255) <= 3
    passthrough_item, passthrough_out = collectors[1].items[0]
    assert passthrough_out is passthrough_item.video_frame  # no source: the decoded frame itself
    assert pipeline.calling_threads == {"livefuse-worker"}


async def test_failed_batch_passes_frames_through() -> None:
    pipeline = FakePipeline(fail_batches=True)
    worker = BatchWorker(fake_binding(pipeline))
    collector = Collector(1)
    lane = WorkerLane("s", FakeStreamState(), FakeSwapSettings(), collector)
    lane.source = FakeSource((1, 2, 3))
    worker.start()
    try:
        worker.attach(lane)
        item = _inbound(0)
        lane.mailbox.put(item)
        await _wait(collector.done)
    finally:
        await worker.close()
    assert collector.items[0][1] is item.video_frame and worker.error is None


async def test_call_runs_on_the_worker_thread_and_forwards_errors() -> None:
    pipeline = FakePipeline()
    worker = BatchWorker(fake_binding(pipeline))
    worker.start()
    try:
        assert await worker.call(lambda: threading.current_thread().name) == "livefuse-worker"
        with pytest.raises(ZeroDivisionError):
            await worker.call(lambda: 1 / 0)
    finally:
        await worker.close()
    with pytest.raises(RuntimeError):
        await worker.call(lambda: None)


async def test_close_before_start_twice_and_after_crash() -> None:
    await BatchWorker(fake_binding()).close()
    worker = BatchWorker(fake_binding())
    worker.start()
    await asyncio.gather(worker.close(), worker.close())
    assert not worker.running

    crashing = BatchWorker(fake_binding())
    lane = WorkerLane("s", None, FakeSwapSettings(), Collector(1))
    crashing.start()
    crashing.attach(lane)
    lane.mailbox.put("not a frame")  # type: ignore[arg-type]  # conversion raises: the thread dies
    for _ in range(100):
        if not crashing.running:
            break
        await asyncio.sleep(0.02)
    assert crashing.error is not None and not crashing.running
    await crashing.close()
    await crashing.close()
