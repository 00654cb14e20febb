"""Shared by the WHIP/WHEP integration tests: the daemon config they run, waits on session state, and
the leak check (no session, no open peer connection, no stray task) every test ends with."""

import asyncio
import gc
from pathlib import Path

from aiortc import RTCPeerConnection

from streamer.realtime.session_registry import SessionRegistry
from tests.integration.daemon_harness import LOOPBACK
from web.daemon_config import DaemonConfig
from web.engine import DaemonEngine

SOURCE = "fr_biden2.jpg"


def config(media_dir: Path, **changes: object) -> DaemonConfig:
    values: dict[str, object] = {
        "ice_addresses": (LOOPBACK,),
        "idle_timeout_s": 3.0,
        "default_source": media_dir / SOURCE,
    }
    values.update(changes)
    return DaemonConfig(**values)  # type: ignore[arg-type]


def open_peer_connections() -> list[RTCPeerConnection]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, RTCPeerConnection) and o.connectionState != "closed"]


def _stray_tasks() -> list[str]:
    """Tasks other than the server's own (request handlers, the idle reaper) and this test's."""
    return [
        task.get_coro().__qualname__  # type: ignore[union-attr]
        for task in asyncio.all_tasks()
        if task is not asyncio.current_task()
        and task.get_coro().__qualname__ not in ("RequestHandler.start", "IdleReaper._run")  # type: ignore[union-attr]
    ]


async def assert_nothing_left(engine: DaemonEngine, settle_s: float = 5.0) -> None:
    """No session, no open peer connection, and every relay/peer task ends within `settle_s`."""
    registry = engine.registry
    assert isinstance(registry, SessionRegistry)
    assert len(registry) == 0, "a session outlived its publisher"
    assert open_peer_connections() == [], "a peer connection was left open"
    deadline = asyncio.get_running_loop().time() + settle_s
    while _stray_tasks() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert _stray_tasks() == [], "tasks left running"


async def wait_connected(engine: DaemonEngine, session_id: str | None, timeout: float = 10.0) -> None:
    """Until the session's peer is connected: aioice starts a consent task that outlives a peer closed
    while its ICE checks still run, so the tests end streams the way publishers do, after connecting."""
    assert engine.registry is not None and session_id is not None
    async with asyncio.timeout(timeout):
        while (session := engine.registry.get(session_id)) is None or (
            session.stats()["connection_state"] != "connected"
        ):
            await asyncio.sleep(0.05)


async def wait_until_empty(engine: DaemonEngine, timeout: float = 10.0) -> None:
    assert engine.registry is not None
    async with asyncio.timeout(timeout):
        while len(engine.registry):
            await asyncio.sleep(0.05)
