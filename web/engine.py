"""The app-wide engine: loads the pipeline off the loop, then owns the worker thread and the sessions."""

import asyncio
import logging
from collections.abc import Callable

from streamer.realtime.batch_worker import BatchWorker
from streamer.realtime.frame_conversion import choose_frame_conversion
from streamer.realtime.metrics import DaemonMetrics
from streamer.realtime.micro_batcher import ONE_FRAME_A_BATCH
from streamer.realtime.peer_session import EndedCallback, PeerSession
from streamer.realtime.pipeline_binding import PipelineBinding
from streamer.realtime.session_registry import SessionRegistry
from streamer.realtime.swap_cadence import SwapCadence
from streamer.transport.encoder_effort import encoder_effort
from web.daemon_config import DaemonConfig

logger = logging.getLogger(__name__)

LoadBinding = Callable[[], PipelineBinding]  # blocking: loads models (seconds)


class DaemonEngine:
    """App-wide resources: loads the pipeline in a thread, then owns the worker and the sessions.

    `start()` returns at once; `loaded` resolves when the models are in (or with the load error).
    `close()` is idempotent and works before start, during loading and after a failed load.
    """

    def __init__(self, config: DaemonConfig, metrics: DaemonMetrics, load_binding: LoadBinding) -> None:
        self.config = config
        self.metrics = metrics
        self._load_binding = load_binding
        self.binding: PipelineBinding | None = None
        self.worker: BatchWorker | None = None
        # which of the sessions' frames to swap while the worker cannot keep up: one for all sessions
        self.cadence: SwapCadence | None = None
        self.registry: SessionRegistry | None = None
        self.loaded: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._loader: asyncio.Task[None] | None = None
        self._closed = False
        self.draining = False  # SIGTERM (web/serve.py): /ready says false, new sessions get 503

    @property
    def ready(self) -> bool:
        """The models are in and the worker runs: sessions can be opened and found."""
        return (
            self.registry is not None and self.worker is not None and self.worker.running and not self._closed
        )

    def unready_reason(self) -> str | None:
        """Why a new call should go elsewhere now (`/ready` answers 503 with it); None: take it."""
        if self._closed or self.draining:
            return "draining: this daemon is shutting down"
        if self.registry is None:
            return "models are still loading"
        if not self.ready:
            return "the frame worker is not running"
        if len(self.registry) >= self.config.max_sessions:
            return f"at capacity: all {self.config.max_sessions} session slots are in use"
        return None

    def start(self) -> None:
        self._loader = asyncio.create_task(self._load(), name="load-pipeline")

    async def _load(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            binding = await asyncio.to_thread(self._load_binding)
            description = binding.pipeline.describe()
            backend = getattr(binding.pipeline, "backend", None)
            conversion = choose_frame_conversion(self.config.frame_path, backend)
            description["frame_path"] = conversion.describe()
            on_cpu = backend is not None and not backend.on_gpu
            policy = ONE_FRAME_A_BATCH if on_cpu else self.config.batch_policy
            worker = BatchWorker(
                binding,
                self.metrics,
                label=self.config.label,
                policy=policy,
                on_lane_failed=self._end_failed_session,
                conversion=conversion,
            )
            worker.start()
        except Exception as error:  # noqa: BLE001 - reported through `loaded`; the owner decides
            logger.error("pipeline failed to load: %s", error, extra={"event": "load_failed"})
            self.loaded.set_exception(error)
            return
        self.binding, self.worker = binding, worker
        self.cadence = SwapCadence(
            worker.busy_seconds,
            stalled_seconds=worker.stalled_seconds,
            on_share=lambda share: encoder_effort.set_strained(share < 1),  # cheaper VP8 while shedding
        )
        self.registry = SessionRegistry(self.config.max_sessions, self._create_session, self.metrics)
        for key, value in description.items():
            self.metrics.model_info.labels(key=key, value=value).set(1)
        stage_histogram = self.metrics.stage_seconds
        for timer in getattr(binding.pipeline, "stage_timers", []):  # pipeline-internal stages
            timer.add_listener(lambda stage, seconds: stage_histogram.labels(stage=stage).observe(seconds))
        occluded = self.metrics.occluded_faces
        for swap_engine in getattr(binding.pipeline, "engines", {}).values():
            if hasattr(swap_engine, "add_occlusion_listener"):  # the mesh engine
                swap_engine.add_occlusion_listener(occluded.inc)
                swap_engine.add_hand_search_listener(self.metrics.palm_searches.inc)
                # a smaller working size while the cadence sheds frames (read per frame on the worker)
                swap_engine.set_strain(lambda: encoder_effort.strained)
        elapsed = loop.time() - started
        logger.info(
            "pipeline ready in %.1f s: %s",
            elapsed,
            description,
            extra={"event": "ready", "latency_ms": round(elapsed * 1000)},
        )
        self.loaded.set_result(None)

    def _end_failed_session(self, session_id: str, reason: str) -> None:
        """Called on the worker thread when one session's frames keep failing: end that session only."""
        loop = self.loaded.get_loop()
        registry = self.registry
        if registry is not None and not loop.is_closed():
            loop.call_soon_threadsafe(registry.report_ended, session_id, reason)

    def _create_session(self, session_id: str, on_ended: EndedCallback) -> PeerSession:
        assert self.worker is not None and self.binding is not None and self.cadence is not None
        return PeerSession(
            session_id,
            self.worker,
            self.binding,
            self.metrics,
            self.cadence,
            idle_timeout_s=self.config.idle_timeout_s,
            on_ended=on_ended,
            rtc_configuration=self.config.ice.rtc_configuration(session_id),
        )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._loader is not None and not self._loader.done():
            self._loader.cancel()  # the loading thread finishes on its own; nothing will use it
            await asyncio.gather(self._loader, return_exceptions=True)
        if not self.loaded.done():
            self.loaded.cancel()
        if self.registry is not None:
            await self.registry.close()
        if self.worker is not None:
            await self.worker.close()
        logger.info("engine closed", extra={"event": "shutdown"})
