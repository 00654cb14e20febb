import asyncio
import fractions
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import av
import numpy as np
import pytest

from models.face import Frame
from streamer.realtime.batch_worker import BatchWorker
from streamer.realtime.device_frames import HostTransfers
from streamer.realtime.frame_conversion import DeviceFrameConversion
from streamer.realtime.metrics import DaemonMetrics
from streamer.realtime.micro_batcher import BatchPolicy
from streamer.realtime.worker_lane import InboundFrame, WorkerLane
from tests.fakes_pipeline import (
    FakeFrameJob,
    FakePipeline,
    FakeSource,
    FakeStreamState,
    FakeSwapSettings,
    face_box,
    fake_binding,
)

OUT_OF_MEMORY = "Failed to allocate memory for requested buffer of size 268435456"  # ONNX Runtime's words


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


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """For state the worker changes without an event (a mailbox's counters)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_newest_frame_of_every_lane_goes_in_one_batch() -> None:
    pipeline = FakePipeline(hold=threading.Event())
    worker = BatchWorker(fake_binding(pipeline), DaemonMetrics())
    collectors = [Collector(2), Collector(1)]
    lanes = [WorkerLane(f"s{i}", FakeStreamState(), FakeSwapSettings(), collectors[i]) for i in range(2)]
    lanes[0].source = FakeSource((255, 0, 0))
    worker.start()
    try:
        for lane in lanes:
            worker.attach(lane)
        lanes[0].mailbox.put(_inbound(0))
        await _until(lambda: pipeline.batch_sizes == [1])  # the first batch is held in the pipeline
        for lane in lanes:
            for pts in (3000, 6000, 9000):
                lane.mailbox.put(_inbound(pts))
        assert pipeline.hold is not None
        pipeline.hold.set()
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


@pytest.mark.parametrize("phases", [False, True])
async def test_a_job_carries_its_frames_capture_time(phases: bool) -> None:
    """The tracker's smoothing needs the time between the frames it sees (the cadence and the mailbox
    skip some): the job carries the frame's RTP time in seconds, or its arrival time without one."""
    pipeline = FakePipeline()
    worker = BatchWorker(fake_binding(pipeline, phases=phases))
    collector = Collector(3)
    lane = WorkerLane("s", FakeStreamState(), FakeSwapSettings(), collector)
    lane.source = FakeSource((1, 2, 3))
    untimed = _inbound(0)
    untimed.video_frame.pts = None
    worker.start()
    try:
        worker.attach(lane)
        for count, item in enumerate((_inbound(9000), _inbound(24000), untimed), start=1):
            lane.mailbox.put(item)
            await _until(lambda count=count: len(collector.items) == count)  # type: ignore[misc]
    finally:
        await worker.close()
    assert pipeline.timestamps == [pytest.approx(0.1), pytest.approx(24000 / 90000), untimed.received_at]


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


@pytest.mark.parametrize("label", [None, "AI"])
async def test_untouched_frames_go_out_as_decoded_and_the_label_is_drawn_last(label: str | None) -> None:
    """The pipeline says "untouched" (None) for a frame it did not swap; the worker sends the decoded
    frame itself, never a conversion of it, unless the daemon labels swapped streams: then that frame
    carries the label too, as a swapped one does, drawn after the swap."""
    binding = fake_binding()
    worker = BatchWorker(binding, label=label)
    collector = Collector(2)
    lane = WorkerLane("s", FakeStreamState(), FakeSwapSettings(), collector)
    lane.source = FakeSource((200, 20, 20))
    worker.start()
    try:
        worker.attach(lane)
        swapped_item = _inbound(0)
        lane.mailbox.put(swapped_item)
        await _until(lambda: len(collector.items) == 1)
        lane.source = None  # the pipeline declines this job: untouched
        untouched_item = _inbound(3000)
        lane.mailbox.put(untouched_item)
        await _wait(collector.done)
    finally:
        await worker.close()
    (_, swapped), (_, untouched) = collector.items
    swapped_rgb: Frame = swapped.to_ndarray(format="rgb24")  # type: ignore[assignment]
    x1, y1, x2, y2 = face_box(swapped_rgb)
    assert np.abs(swapped_rgb[(y1 + y2) // 2, (x1 + x2) // 2].astype(int) - (200, 20, 20)).max() < 8
    if label is None:
        assert untouched is untouched_item.video_frame
    else:
        from streamer.outputs.provenance import label_box

        lx1, ly1, lx2, ly2 = label_box(label, 160, 120)
        for frame in (swapped, untouched):
            assert frame is not untouched_item.video_frame
            corner = frame.to_ndarray(format="rgb24")[ly1:ly2, lx1:lx2]
            assert corner.min() < 30 and corner.max() > 220  # black box, white text and rim
        assert swapped.pts == 0 and untouched.pts == 3000


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

    def broken_deliver(item: InboundFrame, output: av.VideoFrame) -> None:
        raise RuntimeError("a bug in the daemon's delivery")  # not a per-frame fault: the thread dies

    crashing = BatchWorker(fake_binding())
    lane = WorkerLane("s", None, FakeSwapSettings(), broken_deliver)
    crashing.start()
    crashing.attach(lane)
    lane.mailbox.put(_inbound(0))
    for _ in range(100):
        if not crashing.running:
            break
        await asyncio.sleep(0.02)
    assert crashing.error is not None and not crashing.running
    await crashing.close()
    await crashing.close()


@dataclass
class NamedStream(FakeStreamState):
    """A stream state that says whose it is, so a pipeline call can be traced back to its sessions."""

    name: str = ""


@dataclass
class RecordingPipeline(FakePipeline):
    """Records when each process_batch call came and whose frames it held; `on_call` runs inside it
    (with the call's index), as a camera's next frames would arrive while the worker is busy. Raises
    out-of-memory, as ONNX Runtime does, for batches larger than `fits`."""

    fits: int = 16
    calls: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)
    on_call: Callable[[int], None] | None = None

    def process_batch(self, jobs: Sequence[FakeFrameJob]) -> list[Frame | None]:
        names = tuple(job.stream.name for job in jobs if isinstance(job.stream, NamedStream))
        self.calls.append((time.monotonic(), names))
        if self.on_call is not None:
            self.on_call(len(self.calls))
        if len(jobs) > self.fits:
            self.batch_sizes.append(len(jobs))
            raise RuntimeError(OUT_OF_MEMORY)
        return super().process_batch(jobs)


def _named_lanes(count: int, collectors: Sequence[Collector]) -> list[WorkerLane]:
    lanes = [
        WorkerLane(f"s{i}", NamedStream(name=f"s{i}"), FakeSwapSettings(), collectors[i])
        for i in range(count)
    ]
    for lane in lanes:
        lane.source = FakeSource((200, 20, 20))
    return lanes


async def test_a_lone_session_does_not_wait_for_the_deadline() -> None:
    pipeline = RecordingPipeline()
    metrics = DaemonMetrics()
    worker = BatchWorker(fake_binding(pipeline), metrics, policy=BatchPolicy(max_wait_ms=60_000.0))
    collector = Collector(1)
    (lane,) = _named_lanes(1, [collector])
    worker.start()
    try:
        worker.attach(lane)
        lane.mailbox.put(_inbound(0))
        await _wait(collector.done)  # 5 s, far below the 60 s deadline
    finally:
        await worker.close()
    assert [names for _, names in pipeline.calls] == [("s0",)]
    assert (
        metrics.sample("livefuse_batches_total", reason="all_sessions") == 1
        and metrics.sample("livefuse_batch_wait_seconds_count") == 1
    )


async def test_a_frame_waits_for_the_other_session_until_the_deadline_then_runs_alone() -> None:
    pipeline = RecordingPipeline()
    metrics = DaemonMetrics()
    worker = BatchWorker(fake_binding(pipeline), metrics, policy=BatchPolicy(max_wait_ms=200.0))
    collectors = [Collector(1), Collector(1)]
    lanes = _named_lanes(2, collectors)
    worker.start()
    try:
        for lane in lanes:
            worker.attach(lane)
        put_at = time.monotonic()
        lanes[0].mailbox.put(_inbound(0))  # s1 sends nothing
        await _wait(collectors[0].done)
    finally:
        await worker.close()
    ((called_at, names),) = pipeline.calls
    assert names == ("s0",) and not collectors[1].items
    assert called_at - put_at >= 0.15, f"ran {called_at - put_at:.3f} s after the put, before the deadline"
    assert metrics.sample("livefuse_batches_total", reason="deadline") == 1


async def test_twenty_sessions_in_batches_of_four_are_all_served_in_turn() -> None:
    pipeline = RecordingPipeline()
    metrics = DaemonMetrics()
    worker = BatchWorker(fake_binding(pipeline), metrics, policy=BatchPolicy(buckets=(1, 2, 4)))
    collectors = [Collector(1) for _ in range(20)]
    lanes = _named_lanes(20, collectors)
    ten_calls = threading.Event()

    def refill(calls: int) -> None:
        """Every session has a newer frame each time the worker is busy: all 20 always wait."""
        if calls < 10:
            for index, lane in enumerate(lanes):
                lane.mailbox.put(_inbound(calls * 3000, value=index))
        else:
            ten_calls.set()

    pipeline.on_call = refill
    for index, lane in enumerate(lanes):
        worker.attach(lane)
        lane.mailbox.put(_inbound(0, value=index))  # before start: the first look sees all twenty
    worker.start()
    try:
        await _wait(ten_calls)
    finally:
        await worker.close()
    batches = [names for _, names in pipeline.calls]
    assert all(len(names) <= 4 for names in batches)
    everyone = {lane.session_id for lane in lanes}
    for first in (0, 5):  # ceil(20 / 4) = 5 batches serve every session, again and again
        served = [name for names in batches[first : first + 5] for name in names]
        assert sorted(served) == sorted(everyone), batches[first : first + 5]
    assert metrics.sample("livefuse_batches_total", reason="full") >= 10
    # frames replaced in the batcher while others ran are drops, per session and in their own counter
    assert metrics.sample("livefuse_batcher_dropped_total") > 0
    dropped = sum(
        metrics.sample("livefuse_frames_dropped_total", session_id=lane.session_id) for lane in lanes
    )
    assert dropped == metrics.sample("livefuse_batcher_dropped_total")
    assert sum(lane.batcher_dropped for lane in lanes) == metrics.sample(
        "livefuse_batcher_dropped_total"
    )  # in stats too


async def test_out_of_memory_halves_the_policy_the_batcher_closes_batches_by() -> None:
    pipeline = RecordingPipeline(fits=2)
    metrics = DaemonMetrics()
    policy = BatchPolicy(buckets=(1, 2, 4, 8), max_wait_ms=60_000.0)  # no deadline: full or all_sessions
    worker = BatchWorker(fake_binding(pipeline), metrics, policy=policy)
    collectors = [Collector(2) for _ in range(4)]
    lanes = _named_lanes(4, collectors)
    for lane in lanes:
        worker.attach(lane)
        lane.mailbox.put(_inbound(0))  # before start: one batch of all four
    worker.start()
    try:
        await _until(lambda: all(collector.items for collector in collectors))
        assert worker.policy.buckets == (1, 2) and worker.batches == 1
        for lane in lanes:
            lane.mailbox.put(_inbound(3000))
        for collector in collectors:
            await _wait(collector.done)
    finally:
        await worker.close()
    assert pipeline.batch_sizes == [4, 2, 2, 2, 2]  # the failed 4, its halves, then two batches of 2
    # the second round was closed by the batcher at 2 ("full"), not as one batch of 4 cut in pieces
    assert worker.batches == 3 and metrics.sample("livefuse_batches_total", reason="full") == 2
    assert all(len(collector.items) == 2 for collector in collectors)
    for collector in collectors:
        assert collector.items[-1][1].to_ndarray(format="rgb24")[60, 80, 0] > 150, "swapped, not passed"


async def test_detach_removes_the_frame_waiting_in_the_batcher() -> None:
    pipeline = RecordingPipeline()
    worker = BatchWorker(fake_binding(pipeline), policy=BatchPolicy(max_wait_ms=60_000.0))
    collectors = [Collector(1), Collector(1)]
    leaving, staying = _named_lanes(2, collectors)
    worker.start()
    try:
        worker.attach(leaving)
        worker.attach(staying)
        leaving.mailbox.put(_inbound(0))
        await _until(lambda: leaving.mailbox.taken == 1)  # moved from the mailbox into the batcher
        assert not pipeline.calls  # where it waits for `staying`'s frame
        worker.detach(leaving)
        staying.mailbox.put(_inbound(0))
        await _wait(collectors[1].done)
    finally:
        await worker.close()
    assert [names for _, names in pipeline.calls] == [("s1",)]
    assert not collectors[0].items


def delivered(collector: Collector, count: int) -> Callable[[], bool]:
    return lambda: len(collector.items) >= count


class RecordingConversion(DeviceFrameConversion):
    """The device path on its mirrors, noting which thread forgets which session."""

    def __init__(self) -> None:
        super().__init__(HostTransfers())
        self.forgotten: list[tuple[str, str]] = []

    def forget(self, session_id: str) -> None:
        self.forgotten.append((session_id, threading.current_thread().name))
        super().forget(session_id)


async def test_device_frame_path_copies_and_forgets_on_the_worker_thread() -> None:
    pipeline = FakePipeline()
    metrics = DaemonMetrics()
    conversion = RecordingConversion()
    worker = BatchWorker(fake_binding(pipeline), metrics, conversion=conversion)
    collector = Collector(3)
    lane = WorkerLane("s0", FakeStreamState(), FakeSwapSettings(), collector)
    lane.source = FakeSource((255, 0, 0))
    worker.start()
    try:
        worker.attach(lane)
        for count, pts in enumerate((0, 3000, 6000), start=1):
            lane.mailbox.put(_inbound(pts))
            await _until(delivered(collector, count))  # one at a time: none is dropped
        worker.detach(lane)
        await _until(lambda: bool(conversion.forgotten))
    finally:
        await worker.close()
    assert conversion.forgotten == [("s0", "livefuse-worker")]
    assert (conversion.ledger.uploads, conversion.ledger.downloads) == (3, 3)
    assert (
        metrics.sample("livefuse_bus_copies_total", direction="up") == 3
        and metrics.sample("livefuse_bus_copies_total", direction="down") == 3
    )
    assert metrics.sample("livefuse_bus_bytes_total", direction="down") == 3 * 160 * 120 * 3 // 2
    x1, y1, x2, y2 = face_box(np.zeros((120, 160, 3), np.uint8))
    rgb = collector.items[-1][1].to_ndarray(format="rgb24")
    assert abs(int(rgb[(y1 + y2) // 2, (x1 + x2) // 2, 0]) - 255) <= 3  # the swap came back down
