"""A pipeline look-alike for daemon tests: same surface as `streamer.pipeline.frame_pipeline.FramePipeline`,
no models. A "swap" paints the source's colour (derived from its pixels' sha256) into a fixed face box,
so tests can tell exactly which source each session's frames were swapped to, and `delay_s` makes it
as slow as a test needs (overload, /health under load); `hold` keeps a batch in the worker until the
test releases it, for tests that must know a batch is in flight without timing it.
"""

import hashlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from models.face import Frame
from streamer.pipeline.capabilities import FEATURE_ENHANCER, FEATURE_REFERENCE, Capabilities
from streamer.pipeline.choices import ENGINE_NAMES
from streamer.pipeline.swap_engines.base import NoFaceError
from streamer.realtime.pipeline_binding import BatchPhases, PipelineBinding

# the fake's "face": a box in the middle of the frame, clear of the stamp strip at the top
FACE_BOX_FRACTIONS = (0.35, 0.3, 0.65, 0.7)  # x1, y1, x2, y2 as fractions of width/height


@dataclass(frozen=True)
class FakeSwapSettings:
    engine: str = "auto"
    face_selector: str = "many"
    reference_distance: float = 0.6
    enhancer: bool = False
    swap_enabled: bool = True
    mouth_mask: bool = True
    occlusion: bool = True
    latency_stamp: bool = False


@dataclass
class FakeStreamState:
    frames: int = 0
    reference: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class FakeSource:
    colour: tuple[int, int, int]


@dataclass(frozen=True)
class FakeFrameJob:
    frame: Frame
    stream: FakeStreamState
    source: FakeSource | None
    settings: FakeSwapSettings
    timestamp: float | None = None


def source_colour(image: Frame) -> tuple[int, int, int]:
    """The colour the fake paints for this source image (from the sha256 of its pixels)."""
    digest = hashlib.sha256(np.ascontiguousarray(image).tobytes()).digest()
    return (digest[0], digest[1], digest[2])


def face_box(frame: Frame) -> tuple[int, int, int, int]:
    height, width = frame.shape[:2]
    x1, y1, x2, y2 = FACE_BOX_FRACTIONS
    return int(x1 * width), int(y1 * height), int(x2 * width), int(y2 * height)


def fake_wants_swap(source: FakeSource | None, settings: FakeSwapSettings) -> bool:
    return source is not None and settings.swap_enabled


def update_fake_settings(settings: FakeSwapSettings, **changes: object) -> FakeSwapSettings:
    for key, value in changes.items():
        if key not in FakeSwapSettings.__dataclass_fields__:
            raise ValueError(f"unknown setting {key!r}")
        expected = type(getattr(settings, key))
        if type(value) is not expected and not (expected is float and type(value) is int):
            raise ValueError(f"{key} must be {expected.__name__}, got {value!r}")
    return replace(settings, **changes)  # type: ignore[arg-type]


@dataclass
class FakePipeline:
    """Thread-checked: records which threads called it, so tests can prove nothing ran on the loop."""

    delay_s: float = 0.0
    fail_batches: bool = False
    unavailable: dict[str, str] = field(default_factory=dict)  # engine/feature -> reason (capabilities)
    hold: threading.Event | None = None  # when given, every batch waits in the worker until it is set
    calling_threads: set[str] = field(default_factory=set)
    batch_sizes: list[int] = field(default_factory=list)
    fail_tracking: bool = False  # track_batch raises (the two-phase path)
    track_threads: set[str] = field(default_factory=set)  # who ran track_batch / swap_tracked
    swap_threads: set[str] = field(default_factory=set)
    tracked_values: list[list[int]] = field(default_factory=list)  # each track_batch: its frames' first pixel
    timestamps: list[float | None] = field(default_factory=list)  # every job's, in the order they came

    def _record_thread(self) -> None:
        self.calling_threads.add(threading.current_thread().name)

    def prepare_source(self, image: Frame, settings: FakeSwapSettings | None = None) -> FakeSource:
        self._record_thread()
        if float(image.std()) < 2.0:
            raise NoFaceError("no face in the source image (uniform picture)")
        return FakeSource(source_colour(image))

    def new_stream(self) -> FakeStreamState:
        self._record_thread()
        return FakeStreamState()

    def set_reference(self, stream: FakeStreamState, image: Frame | None) -> None:
        self._record_thread()
        if image is not None and float(image.std()) < 2.0:
            raise NoFaceError("no face in the reference image (uniform picture)")
        stream.reference = None if image is None else source_colour(image)

    def process_batch(self, jobs: Sequence[FakeFrameJob]) -> list[Frame | None]:
        self._record_thread()
        self.batch_sizes.append(len(jobs))
        self.timestamps.extend(job.timestamp for job in jobs)
        self._hold_delay_fail()
        for job in jobs:
            job.stream.frames += 1
        return [self._swapped(job) for job in jobs]

    def track_batch(self, jobs: Sequence[FakeFrameJob]) -> list[FakeFrameJob]:
        """The first of the two phases (PipelineBinding.phases): counts the stream's frames."""
        self.track_threads.add(threading.current_thread().name)
        self.batch_sizes.append(len(jobs))
        self.tracked_values.append([int(job.frame[0, 0, 0]) for job in jobs])
        self.timestamps.extend(job.timestamp for job in jobs)
        if self.fail_tracking:
            raise RuntimeError("fake tracking failure")
        for job in jobs:
            job.stream.frames += 1
        return list(jobs)

    def swap_tracked(self, jobs: Sequence[FakeFrameJob]) -> list[Frame | None]:
        """The second phase: held and delayed like `process_batch`."""
        self.swap_threads.add(threading.current_thread().name)
        self._hold_delay_fail()
        return [self._swapped(job) for job in jobs]

    def _hold_delay_fail(self) -> None:
        """What the swap does to a test's timing: held, delayed, or failing as the test set it."""
        if self.hold is not None:
            assert self.hold.wait(timeout=10.0), "the test never released the held batch"
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_batches:
            raise RuntimeError("fake pipeline failure")

    @staticmethod
    def _swapped(job: FakeFrameJob) -> Frame | None:
        if job.source is None or not fake_wants_swap(job.source, job.settings):
            return None  # untouched
        output = job.frame.copy()
        x1, y1, x2, y2 = face_box(output)
        output[y1:y2, x1:x2] = job.source.colour
        return output

    def describe(self) -> dict[str, str]:
        return {"engines": "fake", "default_engine": "fake", "execution_provider": "cpu"}

    def capabilities(self) -> Capabilities:
        return Capabilities.from_reasons(
            ENGINE_NAMES, (FEATURE_ENHANCER, FEATURE_REFERENCE), self.unavailable, "mesh"
        )


def fake_binding(pipeline: FakePipeline | None = None, *, phases: bool = False) -> PipelineBinding:
    """`phases`: bind the fake's two phases too, as `serve` binds the real pipeline's."""
    pipeline = pipeline or FakePipeline()
    return PipelineBinding(
        pipeline=pipeline,
        make_job=FakeFrameJob,
        default_settings=FakeSwapSettings(),
        update_settings=update_fake_settings,
        wants_swap=fake_wants_swap,
        phases=BatchPhases(track=pipeline.track_batch, swap=pipeline.swap_tracked) if phases else None,
    )
