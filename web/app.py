"""The aiohttp application: typed app keys, the app-wide engine (pipeline, worker thread, sessions) in a
cleanup_ctx, routes, and the static page. Models load off the loop after the server is up; `/ready`
turns true when they have.
"""

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from streamer.realtime.batch_worker import BatchWorker
from streamer.realtime.frame_conversion import FramePathChoice, choose_frame_conversion
from streamer.realtime.metrics import DaemonMetrics
from streamer.realtime.micro_batcher import BatchPolicy
from streamer.realtime.peer_session import EndedCallback, PeerSession
from streamer.realtime.pipeline_binding import PipelineBinding
from streamer.realtime.session_registry import SessionRegistry
from streamer.transport.codec_tuning import install_codec_tuning
from streamer.transport.ice_addresses import restrict_ice_addresses
from streamer.transport.jitter_marker import install_marker_release

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
LoadBinding = Callable[[], PipelineBinding]  # blocking: loads models (seconds)


@dataclass(frozen=True)
class DaemonConfig:
    max_sessions: int = 8
    ice_addresses: tuple[str, ...] = ()  # empty: aioice's own choice of host addresses
    idle_timeout_s: float = 5.0  # a peer that sends no video this long is gone
    max_upload_bytes: int = 20 * 1024 * 1024
    static_dir: Path = field(default=STATIC_DIR)
    # hardening (web/auth.py, web/limits.py, streamer/outputs/provenance.py; docs/security.md)
    token: str | None = None  # bearer token required on every non-public route
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers at all
    rate_limit_per_minute: float = 0.0  # session creations per client address; 0: unlimited
    max_upload_pixels: int = 40_000_000
    label: str | None = None  # drawn bottom-right on swapped frames
    drain_timeout_s: float = 10.0  # SIGTERM: open sessions closed within this
    default_source: Path | None = None  # serve --source: the face set on every new WHIP stream
    batch_policy: BatchPolicy = field(default_factory=BatchPolicy)  # serve --batch-wait-ms
    frame_path: FramePathChoice = "auto"  # serve --frame-path


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
        self.registry: SessionRegistry | None = None
        self.loaded: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._loader: asyncio.Task[None] | None = None
        self._closed = False
        self.draining = False  # SIGTERM (web/serve.py): /ready says false, new sessions get 503

    @property
    def ready(self) -> bool:
        return (
            self.registry is not None and self.worker is not None and self.worker.running and not self._closed
        )

    def start(self) -> None:
        self._loader = asyncio.create_task(self._load(), name="load-pipeline")

    async def _load(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            binding = await asyncio.to_thread(self._load_binding)
            description = binding.pipeline.describe()
            conversion = choose_frame_conversion(
                self.config.frame_path, getattr(binding.pipeline, "backend", None)
            )
            description["frame_path"] = conversion.describe()
            worker = BatchWorker(
                binding,
                self.metrics,
                label=self.config.label,
                policy=self.config.batch_policy,
                on_lane_failed=self._end_failed_session,
                conversion=conversion,
            )
            worker.start()
        except Exception as error:  # noqa: BLE001 - reported through `loaded`; the owner decides
            logger.error("pipeline failed to load: %s", error, extra={"event": "load_failed"})
            self.loaded.set_exception(error)
            return
        self.binding, self.worker = binding, worker
        self.registry = SessionRegistry(self.config.max_sessions, self._create_session, self.metrics)
        for key, value in description.items():
            self.metrics.model_info.set(1, key=key, value=value)
        stage_histogram = self.metrics.stage_seconds
        for timer in getattr(binding.pipeline, "stage_timers", []):  # pipeline-internal stages
            timer.add_listener(lambda stage, seconds: stage_histogram.observe(seconds, stage=stage))
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
        assert self.worker is not None and self.binding is not None
        return PeerSession(
            session_id,
            self.worker,
            self.binding,
            self.metrics,
            idle_timeout_s=self.config.idle_timeout_s,
            on_ended=on_ended,
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


METRICS_KEY = web.AppKey("metrics", DaemonMetrics)
ENGINE_KEY = web.AppKey("engine", DaemonEngine)
CONFIG_KEY = web.AppKey("config", DaemonConfig)


def install_transport_fixes(ice_addresses: tuple[str, ...]) -> None:
    """The aiortc latency fixes and the ICE address rule (process-wide, idempotent)."""
    install_marker_release()
    install_codec_tuning()
    if ice_addresses:
        restrict_ice_addresses(ice_addresses)


def create_app(config: DaemonConfig, load_binding: LoadBinding) -> web.Application:
    """The daemon's aiohttp app; the engine starts with the app and is closed on cleanup."""
    from web import observability, signaling

    app = web.Application(client_max_size=config.max_upload_bytes + 64 * 1024)
    app[CONFIG_KEY] = config
    app[METRICS_KEY] = DaemonMetrics()

    async def engine_context(app: web.Application) -> AsyncIterator[None]:
        install_transport_fixes(config.ice_addresses)
        engine = DaemonEngine(config, app[METRICS_KEY], load_binding)
        app[ENGINE_KEY] = engine
        engine.start()
        try:
            yield
        finally:
            await engine.close()

    app.cleanup_ctx.append(engine_context)
    # hardening: CORS, token, audit (web/auth.py); JSON errors, body/SDP/rate limits, idle reaper (web/limits.py)
    from web.auth import access_middlewares
    from web.limits import idle_reaper_context, json_errors, request_limits

    app.middlewares.extend([*access_middlewares(config), json_errors, request_limits(config)])
    app.cleanup_ctx.append(idle_reaper_context)
    observability.add_routes(app)
    signaling.add_routes(app)
    from web import viewer, whep, whip  # WHIP ingest, WHEP egress, viewer page

    whip.add_routes(app)
    whep.add_routes(app)
    viewer.add_routes(app)
    _add_static_routes(app, config.static_dir)
    return app


def _add_static_routes(app: web.Application, static_dir: Path) -> None:
    async def index(request: web.Request) -> web.StreamResponse:
        page = static_dir / "index.html"
        if not page.is_file():
            raise web.HTTPNotFound(text="the page is not installed (web/static/index.html)")
        return web.FileResponse(page)

    app.router.add_get("/", index)
    if static_dir.is_dir():
        app.router.add_static("/static", static_dir)
