"""`run_stream.py bench --room`: the latency the SFU path adds against a direct call, on this machine.

Everything runs inside a private network namespace (bench/clients/network_namespace.py: needs root and
Debian's `janus`): a real Janus, the real daemon as a child process, and aiortc peers in this process,
all sending a panning face at 30 fps with stamps read back at the far end, on one clock. Three phases,
each after a warm-up:

- `direct pass`, `direct swap`: a call to the daemon (client -> daemon -> client), passed through, then
  swapped;
- `janus`: a publisher's feed through Janus alone (publisher -> Janus -> subscriber), the SFU hop;
- `room pass`, `room swap`: the same feed through a room job (publisher -> Janus -> daemon -> Janus ->
  subscriber), with the job's session set to pass through (`swap_enabled: false`), then swapping.

`room - direct`, passed through, is what the conference path costs over a direct call in transport
alone; swapped, it adds what two streams sharing this machine's cores cost each other.
"""

import argparse
import asyncio
import base64
import json
import logging
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp

from bench.clients.daemon_process import DaemonProcess
from bench.clients.frames import SOURCE_PHOTO, TARGET_PHOTO, machine_description, media_dir_from_args
from bench.clients.frames import panning_face_frames as face_frames
from bench.clients.janus_peers import JanusPublisher, JanusSubscriber
from bench.clients.janus_server import OPEN_ROOM, JanusServer, janus_missing_reason
from bench.clients.network_namespace import ADDRESS, entered, namespace, unavailable_reason
from bench.clients.peer_client import LiveResult, PeerClient
from bench.live_bench import MOTION_FRAMES, WARMUP_SECONDS, daemon_args
from bench.whip_bench import WhipPhase, format_whip_table, summarise_whip_phase
from gpu_ops.errors import InvalidInputError
from models.face import Frame
from models.model_files import resolve_models_dir
from streamer.pipeline.image_input import read_image_file
from streamer.sfu import videoroom
from streamer.sfu.janus_api import JanusSession
from streamer.transport.ice_addresses import restrict_ice_addresses

logger = logging.getLogger(__name__)

FPS = 30.0
DEFAULT_SECONDS = 10.0
JANUS_PORT = 8088


def _phase(name: str, seconds: float, sent: int, result: LiveResult) -> WhipPhase:
    return summarise_whip_phase(name, seconds, sent, result.received, list(result.latencies_ms))


async def _direct(
    url: str, frames: list[Frame], source: bytes, engine: str, seconds: float
) -> list[WhipPhase]:
    """A call passed through, then swapped."""
    async with PeerClient(url, lambda index: frames[index % len(frames)], fps=FPS) as client:
        await client.wait_for_frames(1, timeout=20.0)

        async def phase(name: str) -> WhipPhase:
            await asyncio.sleep(WARMUP_SECONDS)
            since, sent = len(client.received), client.track.sent
            await asyncio.sleep(seconds)
            return _phase(name, seconds, client.track.sent - sent, client.result(since))

        passthrough = await phase("direct pass")
        await client.patch_settings({"engine": engine})
        await client.upload_source(source, "image/jpeg")
        return [passthrough, await phase("direct swap")]


async def _wait_publishing(janus_url: str, feed_id: int, timeout: float = 20.0) -> None:
    session = await JanusSession.create(janus_url)
    try:
        handle = await session.attach()
        async with asyncio.timeout(timeout):
            while not any(
                p.feed_id == feed_id and p.publishing
                for p in await videoroom.list_participants(handle, OPEN_ROOM)
            ):
                await asyncio.sleep(0.1)
    finally:
        await session.close()


async def _measure(
    viewer: JanusSubscriber, publisher: JanusPublisher, name: str, seconds: float
) -> WhipPhase:
    await asyncio.sleep(WARMUP_SECONDS)
    since, sent = len(viewer.received), publisher.track.sent
    await asyncio.sleep(seconds)
    return _phase(name, seconds, publisher.track.sent - sent, viewer.result(since))


async def _swap_enabled(http: aiohttp.ClientSession, url: str, session_id: str, enabled: bool) -> None:
    """The room's feed is a session like any other: its settings are /api/sessions/{id}/settings."""
    async with http.patch(
        f"{url}/api/sessions/{session_id}/settings", json={"swap_enabled": enabled}
    ) as response:
        if response.status != 200:
            raise RuntimeError(f"settings refused: {response.status} {await response.text()}")


async def _through_janus(
    url: str, janus_url: str, frames: list[Frame], source: bytes, seconds: float
) -> list[WhipPhase]:
    restrict_ice_addresses([ADDRESS])  # the direct call's client restricted it to 127.0.0.1
    publisher = JanusPublisher(
        janus_url, OPEN_ROOM, lambda index: frames[index % len(frames)], display="bench"
    )
    async with publisher, aiohttp.ClientSession() as http:
        assert publisher.feed_id is not None
        await _wait_publishing(janus_url, publisher.feed_id)
        async with JanusSubscriber(
            janus_url, OPEN_ROOM, publisher.feed_id, sent_ms=publisher.track.sent_ms
        ) as bare:
            await bare.wait_for_frames(1, timeout=20.0)
            sfu = await _measure(bare, publisher, "janus", seconds)
        body = {
            "janus": janus_url,
            "room": OPEN_ROOM,
            "feed": publisher.feed_id,
            "source": base64.b64encode(source).decode(),
        }
        async with http.post(f"{url}/api/rooms", json=body) as response:
            job: dict[str, Any] = await response.json()
            if response.status != 201:
                raise RuntimeError(f"room job refused: {response.status} {job}")
        session_id = str(job["session"]["id"])
        swapped = int(job["published_id"])
        await _wait_publishing(janus_url, swapped)
        async with JanusSubscriber(janus_url, OPEN_ROOM, swapped, sent_ms=publisher.track.sent_ms) as viewer:
            await viewer.wait_for_frames(1, timeout=20.0)
            await _swap_enabled(http, url, session_id, False)
            passthrough = await _measure(viewer, publisher, "room pass", seconds)
            await _swap_enabled(http, url, session_id, True)
            swapping = await _measure(viewer, publisher, "room swap", seconds)
        async with http.get(f"{url}/api/sessions/{session_id}") as response:
            stats = await response.json()
        logger.info(
            "room job's session: fps in %s, frames dropped %s, quality %s",
            stats["fps_in"],
            stats["frames_dropped"],
            stats["quality"],
        )
    return [sfu, passthrough, swapping]


def _difference(room: WhipPhase, direct: WhipPhase) -> float | None:
    if room.p50_ms is None or direct.p50_ms is None:
        return None
    return round(room.p50_ms - direct.p50_ms, 1)


def run_room_bench(args: argparse.Namespace) -> int:
    reason = unavailable_reason() or janus_missing_reason()
    if reason:
        raise InvalidInputError(f"bench --room runs Janus in a network namespace: {reason}")
    seconds = args.seconds if args.seconds is not None else DEFAULT_SECONDS
    engine = args.engine if args.engine != "auto" else "mesh"
    media = media_dir_from_args(args)
    models_dir = resolve_models_dir(args.models_dir).resolve()
    frames = face_frames(read_image_file(media / TARGET_PHOTO), args.width, args.height, MOTION_FRAMES)
    source = (media / SOURCE_PHOTO).read_bytes()
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="livefuse-room-bench-") as scratch,
        namespace() as name,
        entered(name),
    ):
        extra = (*daemon_args(args), "--engine", engine, "--ice-address", ADDRESS)
        with (
            JanusServer(Path(scratch) / "janus", JANUS_PORT) as janus,
            DaemonProcess(models_dir, Path(scratch) / "daemon.log", extra_args=extra) as daemon,
        ):

            async def measure() -> list[WhipPhase]:
                direct = await _direct(daemon.url, frames, source, engine, seconds)
                return [*direct, *await _through_janus(daemon.url, janus.url, frames, source, seconds)]

            phases = asyncio.run(measure())
    size, machine = f"{args.width}x{args.height}", machine_description()
    header = (
        f"room: {size} @ {FPS:.0f} fps, VP8, {engine} engine, {seconds:.0f} s per phase after "
        f"{WARMUP_SECONDS:.0f} s warm-up, Janus {ADDRESS} in a network namespace, {machine}"
    )
    by_name = {phase.name: phase for phase in phases}
    added = {
        kind: _difference(by_name[f"room {kind}"], by_name[f"direct {kind}"]) for kind in ("pass", "swap")
    }
    sys.stdout.write(
        format_whip_table(phases, header)
        + f"\nroom - direct p50: {added['pass']} ms passed through, {added['swap']} ms swapped\n"
    )
    logger.info("bench --room took %.0f s", time.monotonic() - started)
    if getattr(args, "output", None):
        report = {"kind": "room", "size": size, "fps": FPS, "seconds": seconds, "machine": machine}
        report |= {"phases": [asdict(phase) for phase in phases], "room_minus_direct_p50_ms": added}
        Path(args.output).write_text(json.dumps(report, indent=2))
    return 0
