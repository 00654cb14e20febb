"""Run the daemon app in-process on 127.0.0.1 for integration tests, and build the test frames."""

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from aiohttp import web
from av import VideoFrame

from models.face import Frame
from streamer.realtime.batch_worker import BatchWorker
from streamer.realtime.frame_conversion import FrameConversion
from streamer.realtime.pipeline_binding import PipelineBinding
from streamer.realtime.worker_lane import InboundFrame, WorkerLane
from web.app import create_app
from web.app_keys import ENGINE_KEY
from web.daemon_config import DaemonConfig
from web.engine import DaemonEngine

LOOPBACK = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def running_daemon(
    binding: PipelineBinding, config: DaemonConfig | None = None
) -> AsyncIterator[tuple[str, DaemonEngine]]:
    """(base_url, engine) of a daemon serving `binding`, models loaded; everything closed on exit."""
    config = config or DaemonConfig(ice_addresses=(LOOPBACK,), idle_timeout_s=3.0)
    app = create_app(config, lambda: binding)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        port = _free_port()
        await web.TCPSite(runner, LOOPBACK, port).start()
        engine = app[ENGINE_KEY]
        await engine.loaded
        yield f"http://{LOOPBACK}:{port}", engine
    finally:
        await runner.cleanup()


@asynccontextmanager
async def serving_app(app: web.Application, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """Base URL of an already-built daemon `app` on 127.0.0.1, models loaded; closed on exit (tests that
    need the app itself: route enumeration, drain)."""
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        port = _free_port()
        await web.TCPSite(runner, LOOPBACK, port, ssl_context=ssl_context).start()
        await app[ENGINE_KEY].loaded
        yield f"{'https' if ssl_context else 'http'}://{LOOPBACK}:{port}"
    finally:
        await runner.cleanup()


def camera_frame(media_dir: Path, name: str = "fr_obama.jpg", size: tuple[int, int] = (640, 480)) -> Frame:
    """A media photo scaled to `size` width, its top `size` height kept (portraits keep the whole head,
    clear of the stamp strip), RGB."""
    width, height = size
    image: np.ndarray = decoded_photo(media_dir, name)
    scaled_height = round(image.shape[0] * width / image.shape[1])
    image = cv2.resize(image, (width, scaled_height), interpolation=cv2.INTER_AREA)
    if scaled_height < height:
        image = cv2.copyMakeBorder(image, 0, height - scaled_height, 0, 0, cv2.BORDER_REPLICATE)
    return np.ascontiguousarray(image[:height])


def decoded_photo(media_dir: Path, name: str) -> Frame:
    """The photo as the daemon decodes an upload of its bytes (RGB)."""
    bgr = cv2.imread(str(media_dir / name))
    assert bgr is not None, f"cannot read {name}"
    return np.ascontiguousarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), dtype=np.uint8)


async def frames_through_worker(
    binding: PipelineBinding, conversion: FrameConversion, frames: list[VideoFrame], source: Any
) -> list[VideoFrame]:
    """Frames through a real BatchWorker, one at a time (each frame's output before the next is sent),
    with `source` set on the one session: what the daemon does per frame, without WebRTC around it."""
    worker = BatchWorker(binding, conversion=conversion)
    worker.start()
    delivered: list[VideoFrame] = []
    arrived = threading.Event()

    def deliver(item: InboundFrame, output: VideoFrame) -> None:
        delivered.append(output)
        arrived.set()

    try:
        pipeline = binding.pipeline
        stream = await worker.call(pipeline.new_stream)
        lane = WorkerLane("clip", stream, binding.default_settings, deliver)
        lane.source = await worker.call(lambda: pipeline.prepare_source(source, binding.default_settings))
        worker.attach(lane)
        for frame in frames:
            arrived.clear()
            lane.mailbox.put(InboundFrame(frame, time.monotonic()))
            assert await asyncio.to_thread(arrived.wait, 30.0), "no frame came back"
        worker.detach(lane)
    finally:
        await worker.close()
    return delivered
