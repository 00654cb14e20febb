"""`run_stream.py serve`: the WebRTC daemon. The server answers /health at once, loads the models in a
thread (`/ready` turns true when they are in), and shuts down cleanly on SIGINT/SIGTERM: sessions
closed, worker thread joined, nothing left running.
"""

import argparse
import asyncio
import logging
import signal
from typing import Any

from aiohttp import web

from streamer.pipeline_binding import PipelineBinding
from web.app import ENGINE_KEY, DaemonConfig, create_app

logger = logging.getLogger(__name__)


def config_from_args(args: argparse.Namespace) -> DaemonConfig:
    return DaemonConfig(max_sessions=args.max_sessions, ice_addresses=tuple(args.ice_address))


def load_pipeline_binding(args: argparse.Namespace) -> PipelineBinding:
    """Load the real pipeline (blocking, seconds) and bind its job type and settings rules."""
    from models.model_files import resolve_models_dir
    from streamer.frame_pipeline import FrameJob, FramePipeline, PipelineConfig, SwapSettings, settings_with

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


async def serve(app: web.Application, host: str, port: int) -> None:
    """Serve `app` until SIGINT/SIGTERM (or until its pipeline fails to load, which is raised)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stop.set)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        logger.info("serving on http://%s:%d", host, port, extra={"event": "listening"})
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
        logger.info("shutting down", extra={"event": "shutdown"})
    finally:
        for signal_number in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signal_number)
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    app = create_app(config_from_args(args), lambda: load_pipeline_binding(args))
    asyncio.run(serve(app, args.host, args.port))
    return 0
