"""The per-frame pipeline every front end shares: track faces, select, swap with the chosen engine.

Models are loaded once (`FramePipeline.load`) and owned here; the daemon's worker thread, the `swap`
command and the benchmarks all call `process_batch`. Per-stream state (face tracks, smoothing) lives in a
`StreamState` so one pipeline serves many streams. Not thread-safe: one worker thread calls it.
(A little over 400 lines: loading, batched tracking and swapping are one flow that reads best whole.)
"""

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from models.detector import Detections, Detector, InputSize
from models.embedder import Embedder, identity_distance
from models.face import Frame, TrackedFace
from models.landmarks import Landmarker
from models.model_files import ModelStore, tensorrt_cache_dir
from streamer.pipeline.capabilities import (
    FEATURE_ENHANCER,
    FEATURE_REFERENCE,
    Capabilities,
    unavailable_parts,
)
from streamer.pipeline.choices import EngineChoice
from streamer.pipeline.compute_backend import ComputeBackend, choose_backend
from streamer.pipeline.face_selector import select_faces
from streamer.pipeline.face_tracker import FaceTracker, analyse_image
from streamer.pipeline.pipeline_settings import PipelineConfig, SwapSettings
from streamer.pipeline.stage_timer import StageTimer
from streamer.pipeline.swap_engines.base import (
    ENGINE_NAMES,
    EngineName,
    EngineUnavailableError,
    NoFaceError,
    SourceFace,
    StreamMemory,
    SwapEngine,
    SwapOptions,
)
from streamer.pipeline.swap_engines.inswapper import InswapperEngine
from streamer.pipeline.swap_engines.mesh import MeshEngine
from streamer.pipeline.swap_engines.mesh_hands import load_face_hands

logger = logging.getLogger(__name__)


REFERENCE_EMBEDDER = "dlib_resnet_128"
Embedding = NDArray[np.float32]


@dataclass(frozen=True)
class SourceIdentity:
    """A source photo analysed for every loaded engine, so switching engines costs nothing per frame."""

    per_engine: dict[str, SourceFace]


@dataclass
class StreamState:
    """Tracking state of one video stream; only the worker thread touches it."""

    tracker: FaceTracker
    reference_embedding: Embedding | None = None
    frames: int = 0
    memory: StreamMemory = field(default_factory=StreamMemory)  # the engines' per-track smoothing


@dataclass(frozen=True)
class FrameJob:
    frame: Frame
    stream: StreamState
    source: SourceIdentity | None
    settings: SwapSettings
    timestamp: float | None = None  # capture time (s, the stream's clock); None: 1/30 s after the last


@dataclass
class TrackedJob:
    """A job after `FramePipeline.track_batch`: the engine that swaps it (None: the frame stays as it
    is), the faces it swaps, selected, and what the engine could work out for them before the swap."""

    job: FrameJob
    engine_name: EngineName | None = None
    faces: list[TrackedFace] = field(default_factory=list)
    plans: list[Any] | None = None  # the engine's `plan` of each face (SwapOptions.plans), if it has one


class FramePipeline:
    """Owns the models and the swap engines (loaded once); the streams' state is each caller's
    `StreamState`, so one pipeline serves every stream. See the module docstring."""

    def __init__(
        self,
        config: PipelineConfig,
        detector: Detector,
        landmarker: Landmarker,
        engines: dict[str, SwapEngine],
        reference_embedder: Embedder | Callable[[], Embedder] | None,
        providers: dict[str, str],
        backend: ComputeBackend | None = None,
        *,
        unavailable: Mapping[str, str] | None = None,
    ) -> None:
        """`reference_embedder`: the embedder, or a function that loads it on first use (the file is
        optional and only reference face selection needs it). `unavailable`: engine or feature name ->
        why it cannot be used, naming the fix (what `capabilities()` reports)."""
        self.config = config
        self.detector = detector
        self.landmarker = landmarker
        self.engines = engines
        self._reference_embedder = reference_embedder
        self.providers = providers
        self.backend = backend
        self.default_engine: EngineName = _default_engine(config.engine, engines)
        self.timer = StageTimer()
        self._unavailable = dict(unavailable or {})

    @classmethod
    def load(cls, models_dir: Path, config: PipelineConfig) -> "FramePipeline":
        """Verify and load every model the config needs (seconds); raise a LivefuseError naming the fix."""
        store = ModelStore(models_dir)
        backend = choose_backend(config.execution_provider, device_id=config.device_id)
        inference = backend.inference_config(
            intra_op_threads=config.intra_op_threads, tensorrt_cache_dir=str(tensorrt_cache_dir())
        )
        providers: dict[str, str] = {}

        def session(name: str):  # type: ignore[no-untyped-def]
            created = store.session(name, inference)
            providers[name] = created.get_providers()[0]
            return created

        detector = Detector(session(config.detector), store.spec(config.detector))
        landmarker_session = store.batched_session(config.landmarker, inference)  # all streams' faces at once
        providers[config.landmarker] = landmarker_session.get_providers()[0]
        landmarker = Landmarker(landmarker_session, store.spec(config.landmarker))
        mesh = MeshEngine(detector, landmarker, hands=load_face_hands(store, session))  # hands: mesh_hands.py
        engines: dict[str, SwapEngine] = {"mesh": mesh}
        inswapper_models = InswapperEngine.required_models(config.swapper_model)
        missing = [name for name in inswapper_models if not store.is_available(name)]
        if not missing:
            engines["inswapper"] = InswapperEngine.from_store(store, inference, detector, config)
        elif config.engine == "inswapper":
            # asked for explicitly: let the store raise its precise "missing/wrong hash, fetch it" error
            for name in missing:
                store.path(name)
        else:
            logger.info("inswapper engine unavailable (%s not present or not verified)", ", ".join(missing))
        unavailable = unavailable_parts(store, engines, missing, config.enhancer_model, REFERENCE_EMBEDDER)
        reference_embedder = None
        if FEATURE_REFERENCE not in unavailable:  # loaded when a reference is first set

            def reference_embedder() -> Embedder:
                return Embedder(session(REFERENCE_EMBEDDER), store.spec(REFERENCE_EMBEDDER))

        pipeline = cls(
            config,
            detector,
            landmarker,
            engines,
            reference_embedder,
            providers,
            backend,
            unavailable=unavailable,
        )
        logger.info(
            "pipeline ready: engines %s, default %s (%s), providers %s",
            sorted(engines),
            pipeline.default_engine,
            "asked for" if config.engine != "auto" else "auto: inswapper when its files verify, else mesh",
            providers,
        )
        return pipeline

    def engine_for(self, settings: SwapSettings) -> SwapEngine:
        name = self.default_engine if settings.engine == "auto" else settings.engine
        engine = self.engines.get(name)
        if engine is None:
            raise EngineUnavailableError(f"engine {name!r} is not loaded (available: {sorted(self.engines)})")
        return engine

    def prepare_source(self, image: Frame, settings: SwapSettings | None = None) -> SourceIdentity:
        """Analyse a source photo for every loaded engine, so switching engines later costs nothing.

        An engine may refuse a photo another accepts (mesh refuses heads turned past 30 degrees); only
        the refusal of the engine these settings use, or of all engines, is an error (NoFaceError).
        """
        wanted = self.engine_for(settings or SwapSettings()).name
        per_engine: dict[str, SourceFace] = {}
        refusals: dict[str, NoFaceError] = {}
        for name, engine in self.engines.items():
            try:
                per_engine[name] = engine.prepare_source(image)
            except NoFaceError as refusal:
                refusals[name] = refusal
        if wanted in refusals:
            raise refusals[wanted]
        for name, reason in refusals.items():
            logger.info("source not usable with the %s engine: %s", name, reason)
        return SourceIdentity(per_engine)

    @property
    def reference_embedder(self) -> Embedder | None:
        """The embedder of reference face selection, loaded on first use; None when its file is missing."""
        if callable(self._reference_embedder) and not isinstance(self._reference_embedder, Embedder):
            self._reference_embedder = self._reference_embedder()
        return self._reference_embedder

    def capabilities(self) -> Capabilities:
        """Which engines and optional features this pipeline can run, and why not (the fix named)."""
        reasons: dict[str, str] = {
            name: f"engine {name!r} is not loaded" for name in ENGINE_NAMES if name not in self.engines
        }
        return Capabilities.from_reasons(
            ENGINE_NAMES,
            (FEATURE_ENHANCER, FEATURE_REFERENCE),
            {**reasons, **self._unavailable},
            self.default_engine,
        )

    def reference_embedding(self, image: Frame) -> Embedding:
        """Identity of the largest face of a reference photo, for `face_selector="reference"`."""
        embedder = self.reference_embedder
        if embedder is None:
            raise NoFaceError(
                self._unavailable.get(
                    FEATURE_REFERENCE, f"reference face selection needs {REFERENCE_EMBEDDER}"
                )
            )
        faces = analyse_image(self.detector, None, image)
        if not faces:
            raise NoFaceError("the reference image has no face")
        largest = max(faces, key=lambda face: face.area)
        return embedder.embed(image, largest.landmarks_5[None])[0]

    def set_reference(self, stream: StreamState, image: Frame | None) -> None:
        """Give one stream its reference face (None clears it); worker thread only, like every stream call."""
        stream.reference_embedding = None if image is None else self.reference_embedding(image)

    def new_stream(
        self, reference_embedding: Embedding | None = None, detect_every: int | None = None
    ) -> StreamState:
        """Tracking state for one stream; `detect_every=1` for stills (every call is a new picture)."""
        tracker = FaceTracker(
            self.detector,
            self.landmarker,
            detect_every=detect_every or self.config.detect_every,
            detection_width=self.config.detection_width,
        )
        return StreamState(tracker=tracker, reference_embedding=reference_embedding)

    def process_batch(self, jobs: Sequence[FrameJob]) -> list[Frame | None]:
        """Every job's swapped frame; None where the frame is left untouched (no face to swap, or a job
        `wants_swap` declines: no source, swap off, or a source this engine refused).

        Faces are tracked per stream, then every engine runs once over all of its jobs' faces
        (`swap_batch` when the engine has it), so N streams cost one swapper call, not N. The same two
        halves are `track_batch` and `swap_tracked`, which the daemon's worker runs on two threads so
        that one batch's detection and landmarks overlap the previous batch's swap.
        """
        started = time.perf_counter()
        tracked = self.track_batch(jobs)
        outputs = self.swap_tracked(tracked)
        if any(item.engine_name is not None for item in tracked):
            self.timer.record("total", time.perf_counter() - started)
        return outputs

    def track_batch(self, jobs: Sequence[FrameJob]) -> list[TrackedJob]:
        """The first half of `process_batch`: each job's faces, tracked and selected, in job order.
        Touches the streams' trackers only (never their swap memory), so it may run while
        `swap_tracked` works on an earlier batch of the same streams on another thread."""
        started = time.perf_counter()
        tracked = [TrackedJob(job) for job in jobs]
        swapping: list[TrackedJob] = []
        for item in tracked:
            job = item.job
            job.stream.frames += 1
            if not wants_swap(job.source, job.settings):
                continue
            assert job.source is not None
            engine_name = self.engine_for(job.settings).name
            if engine_name in job.source.per_engine:  # else refused by this engine (logged when prepared)
                item.engine_name = engine_name
                swapping.append(item)
        tracked_faces = self._track_batched([item.job for item in swapping])
        for item, faces in zip(swapping, tracked_faces):
            item.faces = self._select(item.job.frame, faces, item.job)
            assert item.engine_name is not None
            plan = getattr(self.engines[item.engine_name], "plan", None)  # the swap's geometry, here
            if plan is not None and item.faces:
                item.plans = plan(item.job.frame, item.faces, self._source_for(item.job, item.engine_name))
        if swapping:
            self.timer.record("track", time.perf_counter() - started)
        return tracked

    def swap_tracked(self, tracked: Sequence[TrackedJob]) -> list[Frame | None]:
        """The second half of `process_batch`: every engine once over its jobs' faces; None where a job
        has nothing to swap. Touches the streams' swap memory, and tells each tracker which of its faces
        are covered (a plain flag per track, safe beside `track_batch` of the next frame)."""
        outputs: list[Frame | None] = [None] * len(tracked)
        started = time.perf_counter()
        pending: dict[EngineName, list[int]] = {}
        for index, item in enumerate(tracked):
            if item.engine_name is not None and item.faces:
                pending.setdefault(item.engine_name, []).append(index)
        for engine_name, indices in pending.items():
            engine = self.engines[engine_name]
            batch = [
                (
                    tracked[index].job.frame,
                    tracked[index].faces,
                    self._source_for(tracked[index].job, engine_name),
                    self._options(tracked[index].job, tracked[index].plans),
                )
                for index in indices
            ]
            swap_batch = getattr(engine, "swap_batch", None)
            swapped = swap_batch(batch) if swap_batch else [engine.swap(*item) for item in batch]
            covered = getattr(engine, "covered_tracks", None)  # the tracker holds a covered face
            for index, frame in zip(indices, swapped):
                outputs[index] = frame
                if covered is not None:
                    stream = tracked[index].job.stream
                    stream.tracker.hold_covered(covered(stream.memory))
        if any(item.engine_name is not None for item in tracked):
            self.timer.record("swap", time.perf_counter() - started)
        return outputs

    def _track_batched(self, jobs: Sequence[FrameJob]) -> list[list[TrackedFace]]:
        """Every job's tracked faces, with one detector run (per frame size) and one landmarker run for
        all streams' faces instead of one of each per stream."""
        detections = self._detect_batched(jobs)
        steps = [
            job.stream.tracker.begin(job.frame, job.timestamp, detections=detected)
            for job, detected in zip(jobs, detections)
        ]
        meshing = [step for step in steps if step.needs_mesh]
        meshes = iter(
            self.landmarker.detect_batch(
                [step.frame for step in meshing],
                [step.mesh_points for step in meshing],
                [step.mesh_boxes for step in meshing],
            )
            if meshing
            else []
        )
        return [
            job.stream.tracker.finish(step, next(meshes) if step.needs_mesh else None)
            for job, step in zip(jobs, steps)
        ]

    def _detect_batched(self, jobs: Sequence[FrameJob]) -> list[Detections | None]:
        """Detections for the jobs whose tracker is due to detect, one detector run per frame size for
        all of them (N streams cost one batched run, not N); None where the tracker will not detect or
        runs alone (it then detects itself, as for a single stream)."""
        groups: dict[tuple[tuple[int, ...], InputSize], list[int]] = {}
        for position, job in enumerate(jobs):
            tracker = job.stream.tracker
            if tracker.detection_due():
                key = (tuple(job.frame.shape), tracker.detection_input_size(job.frame))
                groups.setdefault(key, []).append(position)
        results: list[Detections | None] = [None] * len(jobs)
        for (_, input_size), positions in groups.items():
            if len(positions) < 2:
                continue
            found = self.detector.detect_batch(
                [jobs[position].frame for position in positions], input_size=input_size
            )
            for position, detections in zip(positions, found):
                results[position] = detections
        return results

    def process(self, job: FrameJob) -> Frame:
        """One frame of one stream (the file and camera front ends): swapped, or the frame as it came."""
        swapped = self.process_batch([job])[0]
        return job.frame if swapped is None else swapped

    @staticmethod
    def _source_for(job: FrameJob, engine_name: EngineName) -> SourceFace:
        assert job.source is not None
        return job.source.per_engine[engine_name]

    @staticmethod
    def _options(job: FrameJob, plans: list[Any] | None = None) -> SwapOptions:
        return SwapOptions(
            mouth_mask=job.settings.mouth_mask,
            enhance=job.settings.enhancer,
            occlusion=job.settings.occlusion,
            memory=job.stream.memory,
            plans=plans,
        )

    def _select(self, frame: Frame, faces: list[TrackedFace], job: FrameJob) -> list[TrackedFace]:
        mode = job.settings.face_selector
        if mode != "reference":
            return select_faces(faces, mode)
        if job.stream.reference_embedding is None or self.reference_embedder is None or not faces:
            return []
        embeddings = self.reference_embedder.embed(frame, np.stack([face.landmarks_5 for face in faces]))
        return select_faces(
            faces,
            "reference",
            embeddings=embeddings,
            reference_embedding=job.stream.reference_embedding,
            reference_distance=job.settings.reference_distance,
        )

    @property
    def stage_timers(self) -> list[StageTimer]:
        """Every timer whose stages the daemon exports: the pipeline's and the engines' own."""
        engine_timers = [getattr(engine, "timer", None) for engine in self.engines.values()]
        return [self.timer, *(timer for timer in engine_timers if isinstance(timer, StageTimer))]

    def describe(self) -> dict[str, str]:
        return {
            "engines": ",".join(sorted(self.engines)),
            "default_engine": self.default_engine,
            "detector": self.config.detector,
            "landmarker": self.config.landmarker,
            "execution_provider": self.config.execution_provider,
            "active_provider": ",".join(sorted(set(self.providers.values()))),
            "backend": self.backend.array_backend if self.backend else "numpy",
            "backend_reason": self.backend.reason if self.backend else "",
        }


def _default_engine(choice: EngineChoice, engines: dict[str, SwapEngine]) -> EngineName:
    if choice != "auto":
        return choice
    return "inswapper" if "inswapper" in engines else "mesh"


def wants_swap(source: SourceIdentity | None, settings: SwapSettings) -> bool:
    """The one rule for whether a stream's frames go through the swap: a source is set and swap is on."""
    return source is not None and settings.swap_enabled


__all__ = ["ENGINE_NAMES", "FrameJob", "FramePipeline", "SourceIdentity", "StreamState", "TrackedJob",
           "identity_distance", "wants_swap"]  # fmt: skip
