"""`run_stream.py serve`: the WebRTC daemon. The server answers /health at once, loads the models in a
thread (`/ready` turns true when they are in), and shuts down cleanly on SIGINT/SIGTERM: sessions
closed, worker thread joined, nothing left running.
"""

import argparse
import asyncio
import errno
import logging
import signal
import ssl
from dataclasses import asdict
from typing import Any

from aiohttp import web

from gpu_ops.errors import InvalidInputError
from streamer.pipeline.config_args import config_from_args
from streamer.realtime.pipeline_binding import BatchPhases, PipelineBinding
from web.app import create_app
from web.app_keys import CONFIG_KEY, ENGINE_KEY
from web.daemon_config import DaemonConfig
from web.rooms_api import ROOM_JOBS_KEY

logger = logging.getLogger(__name__)


def tls_from_args(args: argparse.Namespace) -> ssl.SSLContext | None:
    cert, key = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise InvalidInputError("--tls-cert and --tls-key go together")
    from web.auth import tls_context

    return tls_context(cert, key)


def load_pipeline_binding(args: argparse.Namespace) -> PipelineBinding:
    """Load the real pipeline (blocking, seconds) and bind its job type and settings rules."""
    from models.model_files import resolve_models_dir
    from streamer.pipeline.frame_pipeline import FrameJob, FramePipeline, wants_swap
    from streamer.pipeline.pipeline_settings import PipelineConfig, SwapSettings, settings_with

    pipeline = FramePipeline.load(resolve_models_dir(args.models_dir), config_from_args(PipelineConfig, args))
    defaults = config_from_args(SwapSettings, args)
    refusal = pipeline.capabilities().refusal(asdict(defaults))
    if refusal is not None:  # e.g. --enhancer without GFPGAN: every call would ask for it in vain
        raise InvalidInputError(f"the flags ask for what this daemon cannot run: {refusal}")
    return PipelineBinding(
        pipeline,
        make_job=FrameJob,
        default_settings=defaults,
        update_settings=settings_with,
        wants_swap=wants_swap,
        phases=BatchPhases(track=pipeline.track_batch, swap=pipeline.swap_tracked),
    )


async def drain_sessions(app: web.Application) -> None:
    """SIGTERM: new sessions are refused (503: the registry is closing) and the open ones are closed
    cleanly, within the drain timeout; whatever is left after it is closed by the app's cleanup."""
    engine = app[ENGINE_KEY]
    engine.draining = True
    if ROOM_JOBS_KEY in app:  # room jobs leave their rooms first: they would reopen their sessions
        await app[ROOM_JOBS_KEY].close()
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


async def listen(site: web.TCPSite, host: str, port: int) -> None:
    """Start listening; a port in use, a privileged port or an address not of this machine is one line
    naming the fix (InvalidInputError, exit code 2), not a traceback."""
    try:
        await site.start()
    except OSError as error:
        fixes = {
            errno.EADDRINUSE: f"port {port} is in use (another daemon?); fix: choose another --port, or "
            "stop what listens there",
            errno.EACCES: f"port {port} needs privileges here; fix: use a --port above 1023",
            errno.EADDRNOTAVAIL: f"{host} is not an address of this machine; fix: --host 127.0.0.1 "
            "(this machine only) or --host 0.0.0.0 (every interface)",
        }
        fix = fixes.get(error.errno or 0, f"{error.strerror or error}; fix: check --host and --port")
        raise InvalidInputError(f"cannot listen on {host}:{port}: {fix}") from None


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
        await listen(web.TCPSite(runner, host, port, ssl_context=ssl_context), host, port)
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
    app = create_app(config_from_args(DaemonConfig, args), lambda: load_pipeline_binding(args))
    asyncio.run(serve(app, args.host, args.port, ssl_context))
    return 0
