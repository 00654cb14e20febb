"""`run_stream.py camera`: local camera -> the shared swap pipeline -> virtual camera and/or preview.

Three threads, no queues: the capture thread keeps the newest camera frame; one worker thread takes the
newest, swaps it and leaves the result in a one-slot output; the main thread sends the newest result to
the virtual camera at the camera rate (pyvirtualcam pacing), repeating the last one when the worker is
late. A slow pipeline therefore lowers the swapped frame rate but never adds latency.
"""

import argparse
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from gpu_ops.errors import InvalidInputError
from models.face import Frame
from streamer.outputs.camera_capture import CameraCapture, CapturedFrame
from streamer.outputs.virtual_camera import PreviewServer, VirtualCameraSink

logger = logging.getLogger(__name__)

ProcessFrame = Callable[[CapturedFrame], Frame]
FIRST_FRAME_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 0.5
FAILURE_LOG_INTERVAL_S = 5.0


@dataclass(frozen=True)
class CameraLoopStats:
    """What a run did: frames sent out, distinct swapped frames among them, capture counters."""

    frames_sent: int
    frames_processed: int
    frames_failed: int
    captured: int
    capture_dropped: int
    seconds: float


class _IntervalPacer:
    """Pacing at `fps` when there is no virtual camera to pace the loop (preview only)."""

    def __init__(self, fps: float) -> None:
        self._interval = 1.0 / fps
        self._next = time.monotonic()

    def sleep_until_next_frame(self) -> None:
        self._next = max(self._next + self._interval, time.monotonic() - self._interval)
        delay = self._next - time.monotonic()
        if delay > 0:
            time.sleep(delay)


class CameraLoop:
    """Runs capture -> `process` (one worker thread) -> sink/preview until stopped or `max_frames` sent."""

    def __init__(
        self,
        capture: CameraCapture,
        process: ProcessFrame,
        *,
        fps: float,
        sink: VirtualCameraSink | None = None,
        preview: PreviewServer | None = None,
        max_frames: int | None = None,
    ) -> None:
        self.capture = capture
        self.process = process
        self.sink = sink
        self.preview = preview
        self.max_frames = max_frames
        self._pacer = sink if sink is not None else _IntervalPacer(fps)
        self._stop = threading.Event()
        self._output_lock = threading.Lock()
        self._output: Frame | None = None
        self._worker_error: BaseException | None = None
        self._processed = 0
        self._failed = 0
        self._last_failure_log = 0.0

    def stop(self) -> None:
        """Thread- and signal-safe: the loop ends after the frame in flight."""
        self._stop.set()

    def run(self) -> CameraLoopStats:
        started = time.monotonic()
        worker = threading.Thread(target=self._work, name="camera worker", daemon=True)
        worker.start()
        sent = 0
        last: Frame | None = None
        try:
            self._wait_first_output()
            while not self._stop.is_set():
                if self._worker_error is not None:
                    raise self._worker_error
                with self._output_lock:
                    newest, self._output = self._output, None
                last = newest if newest is not None else last  # repeat the last frame when late
                if last is None:
                    break
                if self.sink is not None:
                    self.sink.send(last)
                if self.preview is not None:
                    self.preview.publish(last)
                sent += 1
                if self.max_frames is not None and sent >= self.max_frames:
                    break
                self._pacer.sleep_until_next_frame()
            if self._worker_error is not None:
                raise self._worker_error
        finally:
            self._stop.set()
            worker.join()
        return CameraLoopStats(
            frames_sent=sent,
            frames_processed=self._processed,
            frames_failed=self._failed,
            captured=self.capture.captured,
            capture_dropped=self.capture.dropped,
            seconds=time.monotonic() - started,
        )

    def _wait_first_output(self) -> None:
        """Nothing goes out before the first swapped frame; a device that never delivers is an error."""
        deadline = time.monotonic() + FIRST_FRAME_TIMEOUT_S
        while not self._stop.is_set():
            if self._worker_error is not None:
                raise self._worker_error
            with self._output_lock:
                if self._output is not None:
                    return
            if time.monotonic() > deadline:
                raise InvalidInputError(
                    f"{self.capture.device}: no frame within {FIRST_FRAME_TIMEOUT_S:g} s; is it a camera?"
                )
            self._stop.wait(0.01)

    def _work(self) -> None:
        try:
            while not self._stop.is_set():
                captured = self.capture.read(READ_TIMEOUT_S)
                if captured is None:
                    continue
                output = self._process_one(captured)
                with self._output_lock:
                    self._output = output
        except Exception as error:  # noqa: BLE001 - a capture failure: the main thread re-raises it
            self._worker_error = error

    def _process_one(self, captured: CapturedFrame) -> Frame:
        """A frame that fails to swap goes out unswapped: one bad frame must not end a call."""
        try:
            output = self.process(captured)
            self._processed += 1
            return output
        except Exception as error:  # noqa: BLE001 - logged below, rate-limited; the stream keeps going
            self._failed += 1
            now = time.monotonic()
            if now - self._last_failure_log > FAILURE_LOG_INTERVAL_S:
                self._last_failure_log = now
                logger.warning("frame %d not swapped (%d so far): %r", captured.index, self._failed, error)
            return captured.image


def _pipeline_process(args: argparse.Namespace) -> ProcessFrame:
    """Load the models and the source once; return the per-frame swap for the worker thread."""
    from models.model_files import resolve_models_dir
    from streamer.pipeline.config_args import config_from_args
    from streamer.pipeline.frame_pipeline import FrameJob, FramePipeline
    from streamer.pipeline.image_input import read_image_file
    from streamer.pipeline.pipeline_settings import PipelineConfig, SwapSettings

    if args.face_selector == "reference" and not args.reference_face:
        raise InvalidInputError("--face-selector reference needs --reference-face IMAGE")
    source_image = read_image_file(Path(args.source))
    pipeline = FramePipeline.load(resolve_models_dir(args.models_dir), config_from_args(PipelineConfig, args))
    settings = config_from_args(SwapSettings, args)
    source = pipeline.prepare_source(source_image, settings)
    reference = None
    if settings.face_selector == "reference":
        reference = pipeline.reference_embedding(read_image_file(Path(args.reference_face)))
    stream = pipeline.new_stream(reference_embedding=reference)

    def process(captured: CapturedFrame) -> Frame:
        # the capture time: the reader drops frames while the swap is slow, and the smoothing must know
        return pipeline.process(FrameJob(captured.image, stream, source, settings, captured.captured_at))

    return process


def validate_args(args: argparse.Namespace) -> None:
    if not args.virtual_cam and not args.preview:
        raise InvalidInputError("camera mode needs an output: add --virtual-cam and/or --preview")
    if args.width < 16 or args.height < 16 or args.width % 2 or args.height % 2:
        raise InvalidInputError(f"--width/--height must be even and >= 16, got {args.width}x{args.height}")
    if not 1 <= args.fps <= 120:
        raise InvalidInputError(f"--fps must be in 1..120, got {args.fps}")


def run(args: argparse.Namespace) -> int:
    validate_args(args)
    capture = CameraCapture(args.device, width=args.width, height=args.height, fps=args.fps)
    sink: VirtualCameraSink | None = None
    preview: PreviewServer | None = None
    previous_handler: Callable[[int, FrameType | None], object] | int | None = None
    try:  # devices first, so a missing camera or loopback device fails before the models load
        if args.virtual_cam:
            sink = VirtualCameraSink(
                args.width,
                args.height,
                args.fps,
                backend=args.virtual_cam_backend,
                device=args.virtual_cam_device,
            )
        process = _pipeline_process(args)
        if args.preview:
            preview = PreviewServer()
            preview.start()
        loop = CameraLoop(capture, process, fps=args.fps, sink=sink, preview=preview, max_frames=args.frames)
        if threading.current_thread() is threading.main_thread():
            previous_handler = signal.signal(signal.SIGINT, lambda _signum, _frame: loop.stop())
        capture.start()
        logger.info(
            "camera mode: %s -> %dx%d at %d fps; Ctrl+C stops", args.device, args.width, args.height, args.fps
        )
        stats = loop.run()
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGINT, previous_handler)
        capture.close()
        if sink is not None:
            sink.close()
        if preview is not None:
            preview.close()
    logger.info(
        "camera mode stopped: %d frames out, %d processed, %d failed, %d captured (%d dropped) in %.1f s",
        stats.frames_sent,
        stats.frames_processed,
        stats.frames_failed,
        stats.captured,
        stats.capture_dropped,
        stats.seconds,
    )
    return 0
