"""Shared by the room tests: the daemon's config inside the namespace, a source image, and waits on the
room's participants read through a probe Janus session."""

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import cv2
import numpy as np

from bench.clients.network_namespace import ADDRESS
from streamer.sfu import videoroom
from streamer.sfu.janus_api import JanusHandle, JanusSession
from web.daemon_config import DaemonConfig

Participants = list[videoroom.Participant]


def room_config(**changes: object) -> DaemonConfig:
    values: dict[str, object] = {"ice_addresses": (ADDRESS,), "idle_timeout_s": 3.0}
    values.update(changes)
    return DaemonConfig(**values)  # type: ignore[arg-type]


def textured_frame(seed: int = 1, size: tuple[int, int] = (640, 480)) -> np.ndarray:
    """A 640x480 frame with texture (the fake pipeline refuses uniform sources), stamp strip clear."""
    width, height = size
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, (height // 40, width // 40, 3), dtype=np.uint8)
    frame = cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)
    frame[:20] = 0
    return np.ascontiguousarray(frame)


def source_body(image: np.ndarray) -> str:
    ok, png = cv2.imencode(".png", cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    assert ok
    return base64.b64encode(png.tobytes()).decode()


@asynccontextmanager
async def room_probe(url: str) -> AsyncIterator[JanusHandle]:
    """A handle for reading the room (not joined)."""
    session = await JanusSession.create(url)
    try:
        yield await session.attach()
    finally:
        await session.close()


async def wait_participants(
    handle: JanusHandle, room: int, condition: Callable[[Participants], bool], timeout: float
) -> float:
    """Seconds until `condition(participants)` held (TimeoutError after `timeout`)."""
    started = time.monotonic()
    async with asyncio.timeout(timeout):
        while not condition(await videoroom.list_participants(handle, room)):
            await asyncio.sleep(0.05)
    return time.monotonic() - started


def publishing(feed_id: int) -> Callable[[Participants], bool]:
    return lambda participants: any(p.feed_id == feed_id and p.publishing for p in participants)


def absent(feed_id: int) -> Callable[[Participants], bool]:
    return lambda participants: all(p.feed_id != feed_id for p in participants)


def publishing_as(display: str) -> Callable[[Participants], bool]:
    return lambda participants: any(p.display == display and p.publishing for p in participants)


async def wait_job(
    http: aiohttp.ClientSession, job_url: str, condition: Callable[[dict[str, Any]], bool], timeout: float
) -> dict[str, Any]:
    """The room job's state once `condition` holds (a feed is listed from its join, before the job has
    counted it as published)."""
    async with asyncio.timeout(timeout):
        while True:
            async with http.get(job_url) as response:
                state: dict[str, Any] = await response.json()
            if condition(state):
                return state
            await asyncio.sleep(0.05)
