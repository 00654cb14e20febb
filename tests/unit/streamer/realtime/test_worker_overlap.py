"""The batch worker with the pipeline's two phases on two threads: batch k+1 is tracked while batch k is
swapped, never more than two batches in flight, frames in order, faults handled as on one thread."""

import asyncio
import threading

import av
import pytest

from streamer.realtime.batch_worker import BatchWorker
from streamer.realtime.device_frames import HostTransfers
from streamer.realtime.frame_conversion import DeviceFrameConversion
from streamer.realtime.worker_lane import InboundFrame, WorkerLane
from tests.fakes_pipeline import FakePipeline, FakeSource, FakeStreamState, FakeSwapSettings, fake_binding
from tests.unit.streamer.realtime.test_batch_worker import Collector, _inbound, _until


def _lane(collector: Collector) -> WorkerLane:
    lane = WorkerLane("s", FakeStreamState(), FakeSwapSettings(), collector)
    lane.source = FakeSource((255, 0, 0))
    return lane


async def test_the_next_batch_is_tracked_while_the_last_one_is_swapped() -> None:
    pipeline = FakePipeline(hold=threading.Event())
    worker = BatchWorker(fake_binding(pipeline, phases=True), overlap=True)
    collector = Collector(3)
    lane = _lane(collector)
    worker.start()
    try:
        assert worker.overlapping
        worker.attach(lane)
        lane.mailbox.put(_inbound(0, 10))
        await _until(lambda: pipeline.swap_threads != set())  # frame 10 is held in the swap phase
        lane.mailbox.put(_inbound(3000, 20))
        await _until(lambda: len(pipeline.tracked_values) == 2)  # tracked beside the held swap
        lane.mailbox.put(_inbound(6000, 30))
        lane.mailbox.put(_inbound(9000, 40))
        await asyncio.sleep(0.2)
        assert pipeline.tracked_values == [[10], [20]]  # a rendezvous: no third batch in flight
        assert pipeline.hold is not None
        pipeline.hold.set()
        assert await asyncio.to_thread(collector.done.wait, 5.0)
    finally:
        await worker.close()
    assert pipeline.tracked_values == [[10], [20], [40]]  # 30 was replaced by a newer frame meanwhile
    assert [item.video_frame.pts for item, _ in collector.items] == [0, 3000, 9000]
    assert all(output is not item.video_frame for item, output in collector.items)  # all swapped
    assert pipeline.track_threads == {"livefuse-worker"} and pipeline.swap_threads == {"livefuse-swap"}
    assert worker.error is None and worker.batches == 3


@pytest.mark.parametrize("failing", ["fail_tracking", "fail_batches"])
async def test_a_frame_failing_in_either_phase_passes_through(failing: str) -> None:
    pipeline = FakePipeline(**{failing: True})  # type: ignore[arg-type]
    worker = BatchWorker(fake_binding(pipeline, phases=True), overlap=True)
    collector = Collector(2)
    lane = _lane(collector)
    worker.start()
    try:
        worker.attach(lane)
        first = _inbound(0, 10)
        lane.mailbox.put(first)
        await _until(lambda: len(collector.items) == 1)
        second = _inbound(3000, 20)
        lane.mailbox.put(second)
        assert await asyncio.to_thread(collector.done.wait, 5.0)
    finally:
        await worker.close()
    assert [output for _, output in collector.items] == [first.video_frame, second.video_frame]
    assert lane.failures == 2 and worker.error is None


async def test_a_bug_on_the_swap_stage_ends_the_worker() -> None:
    def deliver(item: InboundFrame, output: av.VideoFrame) -> None:
        raise RuntimeError("a bug in a deliver callback")

    worker = BatchWorker(fake_binding(FakePipeline(), phases=True), overlap=True)
    lane = WorkerLane("s", FakeStreamState(), FakeSwapSettings(), deliver)
    lane.source = FakeSource((255, 0, 0))
    worker.start()
    try:
        worker.attach(lane)
        lane.mailbox.put(_inbound(0, 10))
        await asyncio.sleep(0.1)
        lane.mailbox.put(_inbound(3000, 20))  # handed to a dead stage: the worker thread ends
        await _until(lambda: not worker.running)
    finally:
        await worker.close()
    assert worker.error is not None and "a bug in a deliver callback" in str(worker.error)


async def test_busy_seconds_are_those_of_the_busier_thread() -> None:
    pipeline = FakePipeline(delay_s=0.03)
    worker = BatchWorker(fake_binding(pipeline, phases=True), overlap=True)
    collector = Collector(5)
    lane = _lane(collector)
    worker.start()
    try:
        worker.attach(lane)
        for index in range(5):
            lane.mailbox.put(_inbound(index * 3000, 10 + index))
            await _until(lambda count=index + 1: len(collector.items) == count)  # type: ignore[misc]
    finally:
        await worker.close()
    assert 0.15 <= worker.busy_seconds() < 1.0  # five swaps of 30 ms on the stage; tracking is instant


def test_overlap_is_chosen_only_where_it_is_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert BatchWorker(fake_binding(phases=True)).overlapping  # host conversion, two cores
    assert not BatchWorker(fake_binding()).overlapping  # a pipeline without phases
    device = DeviceFrameConversion(HostTransfers())
    assert not BatchWorker(fake_binding(phases=True), conversion=device).overlapping  # one device stream
    assert not BatchWorker(fake_binding(phases=True), overlap=False).overlapping
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert not BatchWorker(fake_binding(phases=True)).overlapping  # nothing to overlap on
