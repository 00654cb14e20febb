"""The ONE worker thread: takes the newest frame of every active session and runs them through the
pipeline as one batch, so nothing model-sized ever runs on the event loop (DESIGN.md section 2).

Each session owns a `WorkerLane` (mailbox + tracking state + source + settings + a deliver callback).
Other blocking pipeline calls (prepare_source, new_stream) go through `call()`, so the pipeline, which is
not thread-safe, is only ever touched by this thread.
"""

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from av import VideoFrame

from streamer.mailbox import FrameMailbox
from streamer.metrics import DaemonMetrics
from streamer.pipeline_binding import PipelineBinding, Settings, SourceHandle, StreamState

logger = logging.getLogger(__name__)

Result = TypeVar("Result")
IDLE_WAIT_S = 0.25
ERROR_LOG_INTERVAL_S = 5.0


@dataclass(frozen=True)
class InboundFrame:
    """A decoded frame as it left the reader, and when (time.monotonic) it arrived."""

    video_frame: VideoFrame
    received_at: float


Deliver = Callable[[InboundFrame, VideoFrame], None]  # called on the worker thread; must be thread-safe


class WorkerLane:
    """One session's seat at the worker. The loop replaces `source`/`settings` (atomic references)."""

    def __init__(self, session_id: str, stream: StreamState, settings: Settings, deliver: Deliver) -> None:
        self.session_id = session_id
        self.stream = stream
        self.settings = settings
        self.source: SourceHandle | None = None
        self.deliver = deliver
        self.mailbox: FrameMailbox[InboundFrame] = FrameMailbox()
        self.processing_ms: deque[float] = deque(maxlen=120)  # whole-batch time of this lane's frames


def _rgb_of(video_frame: VideoFrame) -> Any:
    return video_frame.to_ndarray(format="rgb24")


def _video_frame_of(rgb: Any, like: VideoFrame) -> VideoFrame:
    """Back to yuv420p (what the encoders want) with the input's pts/time_base."""
    output = VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
    output.pts = like.pts
    output.time_base = like.time_base
    return output


class BatchWorker:
    """Owns the worker thread: `start()`, then `attach()` lanes; `close()` is idempotent and safe
    before start, twice, and after the thread crashed (`error` then holds what killed it)."""

    def __init__(self, binding: PipelineBinding, metrics: DaemonMetrics | None = None) -> None:
        self._binding = binding
        self._metrics = metrics
        self._lanes: dict[str, WorkerLane] = {}
        self._lanes_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._calls: deque[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = deque()
        self._thread: threading.Thread | None = None
        self._closed: asyncio.Future[None] | None = None
        self._last_error_log = 0.0
        self.error: BaseException | None = None
        self.batches = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None or self._closed is not None:
            raise RuntimeError("BatchWorker.start() called twice or after close()")
        self._thread = threading.Thread(target=self._run, name="livefuse-worker", daemon=True)
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
        lane.mailbox.on_put = self._wake.set

    def detach(self, lane: WorkerLane) -> None:
        with self._lanes_lock:
            self._lanes.pop(lane.session_id, None)
        lane.mailbox.clear()

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
            while not self._stopping.is_set():
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()
                self._run_calls()
                self._run_batch()
        except BaseException as error:  # a bug, not a per-frame failure: record it for the owner
            self.error = error
            logger.exception("worker thread crashed")
        finally:
            self._fail_pending_calls()

    def _run_calls(self) -> None:
        while self._calls and not self._stopping.is_set():
            function, future = self._calls.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function())
            except Exception as error:  # noqa: BLE001 - handed to the awaiting caller
                future.set_exception(error)

    def _run_batch(self) -> None:
        with self._lanes_lock:
            lanes = list(self._lanes.values())
        taken = [(lane, item) for lane in lanes if (item := lane.mailbox.take()) is not None]
        if not taken:
            return
        started = time.perf_counter()
        rgb_frames = [_rgb_of(item.video_frame) for _, item in taken]
        jobs = [
            self._binding.make_job(frame=rgb, stream=lane.stream, source=lane.source, settings=lane.settings)
            for (lane, _), rgb in zip(taken, rgb_frames)
        ]
        converted = time.perf_counter()
        try:
            outputs: list[Any] | None = self._binding.pipeline.process_batch(jobs)
        except Exception:  # noqa: BLE001 - one bad batch must not end the streams: pass frames through
            outputs = None
            self._log_batch_error()
        processed = time.perf_counter()
        for index, (lane, item) in enumerate(taken):
            output = outputs[index] if outputs is not None else None
            if output is None or output is rgb_frames[index]:
                lane.deliver(item, item.video_frame)  # untouched: send the decoded frame as it came
            else:
                lane.deliver(item, _video_frame_of(output, item.video_frame))
            lane.processing_ms.append((processed - started) * 1000.0)
        self.batches += 1
        if self._metrics is not None:
            finished = time.perf_counter()
            self._metrics.stage_seconds.observe(converted - started, stage="convert_in")
            self._metrics.stage_seconds.observe(processed - converted, stage="pipeline")
            self._metrics.stage_seconds.observe(finished - processed, stage="convert_out")
            self._metrics.batch_size.observe(len(taken))

    def _log_batch_error(self) -> None:
        now = time.monotonic()
        if now - self._last_error_log >= ERROR_LOG_INTERVAL_S:
            self._last_error_log = now
            logger.exception("pipeline batch failed; frames passed through", extra={"event": "batch_error"})
