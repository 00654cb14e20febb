"""`run_stream.py room`: one room job without the HTTP API: load the pipeline, join the Janus room,
swap the feed and publish "NAME (swapped)" until SIGINT/SIGTERM. The same engine and worker as `serve`
(web/engine.py), so the swap is exactly the daemon's; bad input (no such room, wrong pin, no such feed,
a feed without video, Janus down) is one line and exit 2 (run_stream.py turns the error into that);
Janus down and an unknown room are found before the models load.
"""

import argparse
import asyncio
import hashlib
import logging
import os
import signal
from pathlib import Path

from gpu_ops.errors import InvalidInputError, LivefuseError
from streamer.pipeline.config_args import config_from_args
from streamer.pipeline.image_input import decode_image
from streamer.sfu import videoroom
from streamer.sfu.janus_api import JanusAuth, JanusError, JanusSession, JanusUnreachable
from streamer.sfu.room_worker import RoomJob, RoomWorker
from streamer.sfu.videoroom import RoomError
from streamer.transport.process_patches import TransportPatches
from web.daemon_config import DaemonConfig
from web.engine import DaemonEngine
from web.rooms_api import check_janus_url
from web.serve import load_pipeline_binding

logger = logging.getLogger(__name__)

SECRET_ENV = "LIVEFUSE_JANUS_SECRET"
TOKEN_ENV = "LIVEFUSE_JANUS_TOKEN"
PIN_ENV = "LIVEFUSE_ROOM_PIN"


class RoomStartError(LivefuseError):
    """The room job could not start: bad input the user can fix."""

    exit_code = 2


def job_from_args(args: argparse.Namespace) -> RoomJob:
    path = Path(args.room_source)
    if not path.is_file():
        raise InvalidInputError(f"--source {args.room_source}: no such file")
    data = path.read_bytes()
    return RoomJob(
        check_janus_url(args.janus),
        args.room,
        decode_image(data),
        hashlib.sha256(data).hexdigest(),
        feed_id=args.feed,
        display=args.display,
        pin=args.pin or os.environ.get(PIN_ENV) or None,
        auth=JanusAuth(
            api_secret=args.secret or os.environ.get(SECRET_ENV) or None,
            token=args.janus_token or os.environ.get(TOKEN_ENV) or None,
        ),
    )


async def check_room(job: RoomJob) -> None:
    """RoomStartError unless Janus answers (with the job's secret and token) and has the room."""
    try:
        janus = await JanusSession.create(job.janus_url, job.auth)
    except (JanusError, JanusUnreachable) as error:
        raise RoomStartError(str(error)) from None
    try:
        if not await videoroom.room_exists(await janus.attach(), job.room):
            raise RoomStartError(f"Janus has no room {job.room}")
    except (RoomError, JanusError, JanusUnreachable) as error:
        raise RoomStartError(str(error)) from None
    finally:
        await janus.close()


async def run_room(config: DaemonConfig, job: RoomJob, args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, stop.set)
    from streamer.realtime.metrics import DaemonMetrics

    await check_room(job)  # before the models load (seconds): Janus down or no such room say so at once
    with TransportPatches(config.ice_addresses, config.ice_port_range, config.public_address):
        engine = DaemonEngine(config, DaemonMetrics(), lambda: load_pipeline_binding(args))
        engine.start()
        worker: RoomWorker | None = None
        try:
            await engine.loaded
            assert engine.registry is not None
            worker = RoomWorker("cli", job, engine.registry, config.ice.rtc_configuration)
            try:
                await worker.start()
            except (RoomError, JanusError, JanusUnreachable) as error:
                raise RoomStartError(str(error)) from None
            logger.info("room %d: swapping (Ctrl-C to stop)", job.room, extra={"event": "room_running"})
            await stop.wait()
        finally:
            for signal_number in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signal_number)
            if worker is not None:
                await worker.close()
            await engine.close()


def run(args: argparse.Namespace) -> int:
    job = job_from_args(args)
    config = config_from_args(DaemonConfig, args)
    asyncio.run(run_room(config, job, args))
    return 0
