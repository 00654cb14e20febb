"""The ONE worker thread: runs the sessions' newest frames through the pipeline in batches, so nothing
model-sized ever runs on the event loop (DESIGN.md section 2).

Each session owns a `WorkerLane` (mailbox + tracking state + source + settings + a deliver callback).
The worker moves every lane's newest frame from its mailbox (the thread-safe hand-off from the event
loop) into a `MicroBatcher`, which decides when a batch closes and which sessions' frames it holds: at
once when every session has a frame waiting or the largest bucket is full, else `max_wait_ms` after the
first frame, round-robin when more sessions wait than fit. Other blocking pipeline calls (prepare_source,
new_stream) go through `call()` and run between batches, so the pipeline, which is not thread-safe, is
only ever touched by this thread, but for the one exception below.

Where the pipeline comes in two phases (`PipelineBinding.phases`) and the frame conversion allows it, a
second thread (`SwapStage`) swaps, converts back and delivers batch k while this one converts and tracks
batch k+1: on a 2-core CPU the two halves overlap instead of taking turns on one core. The phases touch
different state of a stream (tracking here, swap memory there). This thread still owns everything
else: calls, the mailboxes, the batcher.

Faults stay with the session that caused them (`BatchFaults`: a failing chunk is retried frame by frame,
out of memory halves the bucket, a session failing `MAX_LANE_FAILURES` frames in a row is ended). A
frame the decoder mangled is dropped.
"""

import asyncio
import concurrent.futures
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from av import VideoFrame

from streamer.outputs.provenance import check_label, draw_label
from streamer.realtime.batch_faults import BatchFaults, LaneFailed
from streamer.realtime.frame_conversion import FrameConversion, HostFrameConversion
from streamer.realtime.metrics import DaemonMetrics
from streamer.realtime.micro_batcher import Batch, BatchPolicy, MicroBatcher
from streamer.realtime.pipeline_binding import PipelineBinding
from streamer.realtime.swap_stage import SwapStage
from streamer.realtime.worker_lane import ConvertedFrame, InboundFrame, WorkerLane

logger = logging.getLogger(__name__)

Result = TypeVar("Result")
IDLE_WAIT_S = 0.25


@dataclass
class _BatchClock:
    """perf_counter readings between the steps of one batch."""

    started: float
    converted: float = 0.0
    tracked: float = 0.0  # two phases: the track phase done (then the batch waits for the swap stage)
    swapping: float = 0.0  # two phases: the swap stage took the batch
    processed: float = 0.0
    finished: float = 0.0

    @property
    def pipeline_s(self) -> float:
        """Time in the pipeline, without the wait between the phases."""
        if not self.swapping:
            return self.processed - self.converted
        return (self.tracked - self.converted) + (self.processed - self.swapping)

    @property
    def processing_ms(self) -> float:
        return (self.processed - self.started) * 1000.0


class BatchWorker:
    """Owns the worker thread: `start()`, then `attach()` lanes; `close()` is idempotent and safe
    before start, twice, and after the thread crashed (`error` then holds what killed it)."""

    def __init__(
        self,
        binding: PipelineBinding,
        metrics: DaemonMetrics | None = None,
        *,
        label: str | None = None,
        policy: BatchPolicy | None = None,
        on_lane_failed: LaneFailed | None = None,
        conversion: FrameConversion | None = None,
        overlap: bool | None = None,
    ) -> None:
        """`overlap`: run the pipeline's two phases on two threads (see the module docstring); None:
        where the binding has phases, the conversion is `overlap_safe` and the machine has 2+ cores."""
        self._binding = binding
        self.conversion: FrameConversion = conversion or HostFrameConversion()
        if overlap is None:
            overlap = getattr(self.conversion, "overlap_safe", False) and (os.cpu_count() or 1) >= 2
        self._stage: SwapStage | None = None
        if overlap and binding.phases is not None:
            self._stage = SwapStage(self.conversion.activate)
        self._track_s = 0.0  # two phases: this thread's time on batches (the stage keeps its own)
        self._forget: deque[str] = deque()  # sessions whose conversion state goes, between batches
        self._metrics = metrics
        ledger = getattr(self.conversion, "ledger", None)  # the device frame path counts its copies
        if ledger is not None and metrics is not None:
            ledger.add_listener(metrics.count_bus_copy)
        self._label = check_label(label) if label is not None else None
        # owns the policy (see `policy`); locks itself, as attach/detach run on the event loop
        self._batcher: MicroBatcher[tuple[WorkerLane, InboundFrame]] = MicroBatcher(policy)
        self._faults = BatchFaults(self._batcher, on_lane_failed)
        self._lanes: dict[str, WorkerLane] = {}
        self._lanes_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._calls: deque[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = deque()
        self._thread: threading.Thread | None = None
        self._closed: asyncio.Future[None] | None = None
        self.error: BaseException | None = None
        self.batches = 0
        self._busy_s = 0.0  # time spent in batches, written by the worker thread only
        self._calls_s = 0.0  # time spent in call() functions, likewise

    def busy_seconds(self) -> float:
        """Total time the worker has spent running batches (any thread may read it; sessions sample it
        to see how much headroom is left, streamer/realtime/swap_cadence.py). With two phases, the
        busier of the two threads: the one that sets the pace."""
        if self._stage is None:
            return self._busy_s
        return max(self._track_s, self._stage.busy_seconds())

    @property
    def overlapping(self) -> bool:
        """Whether the two phases of a batch run on two threads."""
        return self._stage is not None

    def stalled_seconds(self) -> float:
        """Total time the worker has spent in `call()` functions (a source prepared, a stream set up):
        frames waited meanwhile, so the swap cadence does not judge the load by such a stretch."""
        return self._calls_s

    @property
    def policy(self) -> BatchPolicy:
        """The batch policy in force: the batcher's, so both shrink together after out-of-memory."""
        return self._batcher.policy

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def lane_ids(self) -> list[str]:
        """Sessions attached now (a closed session must not be among them)."""
        with self._lanes_lock:
            return list(self._lanes)

    def start(self) -> None:
        if self._thread is not None or self._closed is not None:
            raise RuntimeError("BatchWorker.start() called twice or after close()")
        self._thread = threading.Thread(target=self._run, name="livefuse-worker", daemon=True)
        if self._stage is not None:
            self._stage.start()
        self._thread.start()

    async def close(self) -> None:
        if self._closed is not None:
            await self._closed
            return
        self._closed = asyncio.get_running_loop().create_future()
        try:
            self._stopping.set()
            self._wake.set()
            if self._thread is not None:
                await asyncio.to_thread(self._thread.join)
            self._fail_pending_calls()
        finally:
            self._closed.set_result(None)

    def attach(self, lane: WorkerLane) -> None:
        with self._lanes_lock:
            self._lanes[lane.session_id] = lane
            self._batcher.attach(lane.session_id)
        lane.mailbox.on_put = self._wake.set
        self._wake.set()  # a frame put before attach must not wait for the idle timeout

    def detach(self, lane: WorkerLane) -> None:
        """After this returns no frame of the lane waits anywhere; a batch already running still
        delivers its frame (the session ignores it once closed)."""
        with self._lanes_lock:
            self._lanes.pop(lane.session_id, None)
            self._batcher.detach(lane.session_id)
        lane.mailbox.clear()
        self._forget.append(lane.session_id)  # its device buffers, once a batch holding its frame is done
        self._wake.set()

    async def call(self, function: Callable[[], Result]) -> Result:
        """Run a blocking pipeline call on the worker thread, between batches."""
        if not self.running or self._stopping.is_set():
            raise RuntimeError("the worker is not running")
        future: concurrent.futures.Future[Result] = concurrent.futures.Future()
        self._calls.append((function, future))
        self._wake.set()
        return await asyncio.wrap_future(future)

    def _fail_pending_calls(self) -> None:
        while self._calls:
            _, future = self._calls.popleft()
            future.cancel()

    def _run(self) -> None:
        try:
            with self.conversion.activate():  # the engine's CUDA stream for every kernel of this thread
                self._loop()
        except BaseException as error:  # a bug, not a per-frame failure: record it for the owner
            self.error = error
            logger.exception("worker thread crashed")
        finally:
            if self._stage is not None:
                self._stage.close()  # the batch it swaps still goes out
            self._fail_pending_calls()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()  # before looking: a frame or call() arriving after this wakes us
            if self._forget and self._stage is not None:
                self._stage.wait_idle()  # its batch may hold a detached session's frame
            while self._forget:
                self.conversion.forget(self._forget.popleft())
            self._run_calls()
            if self._stage is not None and self._wait_for_stage():
                continue  # woken by a call or close: look again
            self._submit_new_frames()
            batch = self._batcher.poll()
            if batch is not None:
                self._run_batch(batch)
                continue  # pending calls first, then what waited meanwhile
            due_in = self._batcher.seconds_until_due()
            self._wake.wait(IDLE_WAIT_S if due_in is None else min(due_in, IDLE_WAIT_S))

    def _wait_for_stage(self) -> bool:
        """Two phases: wait until a batch taken now would be tracked about when the swap stage frees, so
        it holds the newest frames; True when a call or close cut the wait short."""
        assert self._stage is not None
        deadline = time.perf_counter() + self._stage.feed_due_in()
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0.001:
                return False
            self._wake.clear()  # frames arriving meanwhile are taken right after this wait
            if self._calls or self._stopping.is_set():
                return True
            self._wake.wait(remaining)

    def _run_calls(self) -> None:
        while self._calls and not self._stopping.is_set():
            function, future = self._calls.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            started = time.perf_counter()
            try:
                future.set_result(function())
            except Exception as error:  # noqa: BLE001 - handed to the awaiting caller
                future.set_exception(error)
            finally:
                self._calls_s += time.perf_counter() - started

    def _submit_new_frames(self) -> None:
        """Every lane's newest frame into the batcher; under the lanes lock, so a detached lane's frame
        cannot slip in after `detach`. A frame it replaces was taken from the mailbox and never ran: a drop."""
        with self._lanes_lock:
            for lane in self._lanes.values():
                item = lane.mailbox.take()
                if item is None:
                    continue
                self._observe_age("mailbox", item)
                dropped_before = self._batcher.dropped
                self._batcher.submit(lane.session_id, (lane, item))
                if self._batcher.dropped == dropped_before:
                    continue
                lane.batcher_dropped += 1
                if self._metrics is not None:
                    self._metrics.frames_dropped.labels(session_id=lane.session_id).inc()
                    self._metrics.batcher_dropped.inc()

    def _observe_age(self, stage: str, item: InboundFrame) -> None:
        if self._metrics is not None:
            self._metrics.frame_age_seconds.labels(stage=stage).observe(time.monotonic() - item.received_at)

    def _run_batch(self, batch: Batch[tuple[WorkerLane, InboundFrame]]) -> None:
        """Convert in, run the jobs, convert out and deliver, record: each a step below. With two
        phases, the track phase runs here and the rest is handed to the swap stage."""
        clock = _BatchClock(time.perf_counter())
        for _, item in batch.items:
            self._observe_age("batch", item)
        converted = self._convert_in(list(batch.items))
        clock.converted = time.perf_counter()
        jobs = [
            self._binding.make_job(
                frame=frame.rgb,
                stream=frame.lane.stream,
                source=frame.lane.source,
                settings=frame.lane.settings,
                timestamp=frame.item.capture_time,
            )
            for frame in converted
        ]
        lanes = [frame.lane for frame in converted]
        phases = self._binding.phases
        if self._stage is None or phases is None:
            outputs = self._faults.run(jobs, lanes, self._binding.pipeline.process_batch)
            clock.processed = time.perf_counter()
            self._finish_batch(batch, clock, converted, outputs)
            self._busy_s += clock.finished - clock.started
            return
        tracked = self._faults.run(jobs, lanes, phases.track, last_phase=False)
        clock.tracked = time.perf_counter()
        self._track_s += clock.tracked - clock.started
        self._stage.fed(clock.tracked - clock.started)
        self._stage.hand(functools.partial(self._swap_phase, batch, clock, converted, tracked))

    def _swap_phase(
        self,
        batch: Batch[tuple[WorkerLane, InboundFrame]],
        clock: _BatchClock,
        converted: list[ConvertedFrame],
        tracked: list[Any | None],
    ) -> None:
        """On the swap stage: swap what the track phase gave (a job that failed there passes through),
        then convert out, deliver and record."""
        assert self._binding.phases is not None
        clock.swapping = time.perf_counter()
        kept = [index for index, item in enumerate(tracked) if item is not None]
        swapped = self._faults.run(
            [tracked[index] for index in kept],
            [converted[index].lane for index in kept],
            self._binding.phases.swap,
        )
        outputs: list[Any | None] = [None] * len(converted)
        for index, output in zip(kept, swapped):
            outputs[index] = output
        clock.processed = time.perf_counter()
        self._finish_batch(batch, clock, converted, outputs)

    def _finish_batch(
        self,
        batch: Batch[tuple[WorkerLane, InboundFrame]],
        clock: _BatchClock,
        converted: list[ConvertedFrame],
        outputs: list[Any | None],
    ) -> None:
        for frame, output in zip(converted, outputs):
            self._observe_age("swap", frame.item)
            frame.lane.deliver(frame.item, self._convert_out(frame, output))
            frame.lane.processing_ms.append(clock.processing_ms)
        self.batches += 1
        clock.finished = time.perf_counter()
        self._record_batch(batch, clock)

    def _record_batch(self, batch: Batch[tuple[WorkerLane, InboundFrame]], clock: "_BatchClock") -> None:
        if self._metrics is None:
            return
        self._metrics.stage_seconds.labels(stage="convert_in").observe(clock.converted - clock.started)
        self._metrics.stage_seconds.labels(stage="pipeline").observe(clock.pipeline_s)
        self._metrics.stage_seconds.labels(stage="convert_out").observe(clock.finished - clock.processed)
        self._metrics.batch_size.observe(len(batch.items))
        self._metrics.batches.labels(reason=batch.reason).inc()
        for waited in batch.waited_s():
            self._metrics.batch_wait_seconds.observe(waited)

    def _convert_in(self, taken: list[tuple[WorkerLane, InboundFrame]]) -> list[ConvertedFrame]:
        converted = []
        for lane, item in taken:
            try:
                rgb = self.conversion.to_pipeline(lane.session_id, item.video_frame)
            except Exception as error:  # noqa: BLE001 - a mangled frame (ValueError, av.FFmpegError) or anything
                # else one frame can raise: drop it, the session's next one may be fine; the others go on
                self._faults.lane_failed(lane, error)
                continue
            converted.append(ConvertedFrame(lane, item, rgb))
        return converted

    def _convert_out(self, frame: ConvertedFrame, output: Any | None) -> VideoFrame:
        """The frame to send. Untouched (None: the pipeline did not swap it, or it failed) goes out as it
        was decoded, unless the daemon labels its swapped streams: then this frame of a swapped stream is
        labelled too. The label is drawn here, after everything the models did, so nothing hides it.
        Only what the swap changed and the label are converted back; the rest keeps the decoder's planes."""
        if output is None and self._label is None:
            return frame.item.video_frame
        picture = frame.rgb if output is None else output
        drawn = []
        if self._label is not None:
            picture = picture if getattr(picture.flags, "writeable", True) else picture.copy()
            drawn.append(draw_label(picture, self._label))  # maybe over frame.rgb itself: named, not found
        try:
            return self.conversion.to_video_frame(
                frame.lane.session_id, picture, frame.item.video_frame, source=frame.rgb, drawn=drawn
            )
        except Exception as error:  # noqa: BLE001 - this session's frame goes out as it came in
            self._faults.lane_failed(frame.lane, error)
            return frame.item.video_frame
