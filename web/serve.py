"""`run_stream.py serve`: the WebRTC daemon. The server answers /health at once, loads the models in a
thread (`/ready` turns true when they are in), and shuts down cleanly on SIGINT/SIGTERM: sessions
closed, worker thread joined, nothing left running.
"""

import argparse
import asyncio
import logging
import math
import os
import signal
import ssl
from pathlib import Path
from typing import Any

from aiohttp import web

from gpu_ops.errors import InvalidInputError
from streamer.realtime.micro_batcher import BatchPolicy
from streamer.realtime.pipeline_binding import PipelineBinding
from web.app import create_app
from web.app_keys import CONFIG_KEY, ENGINE_KEY
from web.daemon_config import DaemonConfig
from web.network_config import network_fields

logger = logging.getLogger(__name__)


def config_from_args(args: argparse.Namespace) -> DaemonConfig:
    return DaemonConfig(
        max_sessions=args.max_sessions,
        ice_addresses=tuple(args.ice_address),
        default_source=default_source_path(getattr(args, "source", None)),
        batch_policy=batch_policy_from_args(args),
        frame_path=getattr(args, "frame_path", "auto"),
        **hardening_fields(args),
        **network_fields(args),
    )


def batch_policy_from_args(args: argparse.Namespace) -> BatchPolicy:
    """`--batch-wait-ms` checked before the server starts (a NaN deadline would never close a batch)."""
    wait_ms = args.batch_wait_ms
    if not math.isfinite(wait_ms) or wait_ms < 0:
        raise InvalidInputError(f"--batch-wait-ms must be a number >= 0, got {wait_ms}")
    return BatchPolicy(max_wait_ms=wait_ms)


def hardening_fields(args: argparse.Namespace) -> dict[str, Any]:
    """DaemonConfig fields of the hardening flags (docs/security.md); absent flags keep the defaults."""
    from streamer.outputs.provenance import check_label
    from web.auth import TOKEN_ENV

    defaults = DaemonConfig()
    label = getattr(args, "label", None)
    upload_mb = getattr(args, "max_upload_mb", None)
    megapixels = getattr(args, "max_upload_megapixels", None)
    return {
        "token": getattr(args, "token", None) or os.environ.get(TOKEN_ENV) or None,
        "cors_origins": tuple(getattr(args, "cors_origin", None) or ()),
        "idle_timeout_s": getattr(args, "idle_timeout", None) or defaults.idle_timeout_s,
        "rate_limit_per_minute": getattr(args, "rate_limit", None) or defaults.rate_limit_per_minute,
        "label": check_label(label) if label is not None else None,
        "max_upload_bytes": round(upload_mb * 1024 * 1024) if upload_mb else defaults.max_upload_bytes,
        "max_upload_pixels": round(megapixels * 1_000_000) if megapixels else defaults.max_upload_pixels,
        "drain_timeout_s": getattr(args, "drain_timeout", None) or defaults.drain_timeout_s,
    }


def tls_from_args(args: argparse.Namespace) -> ssl.SSLContext | None:
    cert, key = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise InvalidInputError("--tls-cert and --tls-key go together")
    from web.auth import tls_context

    return tls_context(cert, key)


def default_source_path(source: str | None) -> Path | None:
    """`--source FACE.jpg` checked before the server starts: InvalidInputError when it is not a file."""
    if source is None:
        return None
    path = Path(source)
    if not path.is_file():
        raise InvalidInputError(f"--source {source}: no such file")
    return path


def load_pipeline_binding(args: argparse.Namespace) -> PipelineBinding:
    """Load the real pipeline (blocking, seconds) and bind its job type and settings rules."""
    from models.model_files import resolve_models_dir
    from streamer.pipeline.frame_pipeline import (
        FrameJob,
        FramePipeline,
        PipelineConfig,
        SwapSettings,
        settings_with,
    )

    config = PipelineConfig(
        execution_provider=args.execution_provider,
        device_id=args.device_id,
        detector=args.detector,
        engine=args.engine,
        swapper_model=args.swapper_model,
    )
    pipeline = FramePipeline.load(resolve_models_dir(args.models_dir), config)
    defaults = SwapSettings(
        engine=args.engine,
        face_selector=args.face_selector,
        reference_distance=args.reference_distance,
        enhancer=args.enhancer,
        mouth_mask=not args.no_mouth_mask,
    )
    return PipelineBinding(
        pipeline, make_job=FrameJob, default_settings=defaults, update_settings=settings_with
    )


async def drain_sessions(app: web.Application) -> None:
    """SIGTERM: new sessions are refused (503: the registry is closing) and the open ones are closed
    cleanly, within the drain timeout; whatever is left after it is closed by the app's cleanup."""
    engine = app[ENGINE_KEY]
    engine.draining = True
    registry = engine.registry
    if registry is None:
        return
    timeout_s = app[CONFIG_KEY].drain_timeout_s
    logger.info(
        "draining %d sessions (at most %.0f s)", len(registry), timeout_s, extra={"event": "draining"}
    )
    try:
        await asyncio.wait_for(registry.close(), timeout_s)
    except TimeoutError:
        logger.warning(
            "drain took over %.0f s; closing the rest now", timeout_s, extra={"event": "drain_timeout"}
        )


async def serve(
    app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> None:
    """Serve `app` until SIGINT/SIGTERM (or until its pipeline fails to load, which is raised)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stop.set)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
        scheme = "https" if ssl_context is not None else "http"
        logger.info("serving on %s://%s:%d", scheme, host, port, extra={"event": "listening"})
        engine = app[ENGINE_KEY]
        stopped = asyncio.create_task(stop.wait(), name="wait-for-signal")
        try:
            waiters: list[asyncio.Future[Any]] = [stopped, engine.loaded]
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if engine.loaded in done:
                engine.loaded.result()  # raises the load error: the daemon cannot serve
                await stopped
        finally:
            stopped.cancel()
            await asyncio.gather(stopped, return_exceptions=True)
        await drain_sessions(app)
        logger.info("shutting down", extra={"event": "shutdown"})
    finally:
        for signal_number in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signal_number)
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    ssl_context = tls_from_args(args)
    app = create_app(config_from_args(args), lambda: load_pipeline_binding(args))
    asyncio.run(serve(app, args.host, args.port, ssl_context))
    return 0
