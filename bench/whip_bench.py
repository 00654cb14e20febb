"""`run_stream.py bench --whip`: WHIP publish -> swap -> WHEP receive latency through the real daemon on
loopback.

The daemon runs as a child process (DaemonProcess). An OBS-like aiortc publisher (bench/clients/whip_client.py:
H264 + Opus, offer without candidates) sends a panning face at the requested size and 30 fps with a
millisecond clock stamped into every frame; a WHEP viewer of the same session reads the stamp back, so
latency = receive time - publish time on one clock: H264 encode, network, daemon (decode, newest-frame
mailbox, swap, relay, encode for the viewer), network, decode. Two phases on one stream: passthrough
(no source) and swapping (source set through the REST API, mesh engine unless --engine names another).
"""

import argparse
import asyncio
import json
import logging
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from bench.clients.frames import (
    face_size_from_args,
    face_size_label,
    machine_description,
)
from bench.clients.whip_client import WhepViewer, WhipPublisher
from bench.live_bench import WARMUP_SECONDS, loopback_bench
from models.face import Frame

logger = logging.getLogger(__name__)

FPS = 30.0
DEFAULT_SECONDS = 10.0


@dataclass(frozen=True)
class WhipPhase:
    """One measured phase; latencies in ms over the frames whose stamp came back readable."""

    name: str
    seconds: float
    published: int
    received: int
    stamped: int
    fps_received: float
    p50_ms: float | None
    p95_ms: float | None
    max_ms: float | None


def summarise_whip_phase(
    name: str, seconds: float, published: int, received: int, latencies_ms: list[float]
) -> WhipPhase:
    values = np.asarray(latencies_ms, dtype=np.float64)
    has = values.size > 0
    return WhipPhase(
        name=name,
        seconds=seconds,
        published=published,
        received=received,
        stamped=int(values.size),
        fps_received=round(received / seconds, 1) if seconds > 0 else 0.0,
        p50_ms=round(float(np.percentile(values, 50)), 1) if has else None,
        p95_ms=round(float(np.percentile(values, 95)), 1) if has else None,
        max_ms=round(float(values.max()), 1) if has else None,
    )


def format_whip_table(phases: list[WhipPhase], header: str) -> str:
    def ms(value: float | None) -> str:
        return f"{value:>9.1f}" if value is not None else f"{'-':>9}"

    lines = [
        header,
        f"{'phase':<13}{'sent':>6}{'recv':>6}{'stamped':>9}{'fps':>7}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}",
    ]
    for phase in phases:
        lines.append(
            f"{phase.name:<13}{phase.published:>6}{phase.received:>6}{phase.stamped:>9}"
            f"{phase.fps_received:>7.1f}{ms(phase.p50_ms)}{ms(phase.p95_ms)}{ms(phase.max_ms)}"
        )
    return "\n".join(lines)


async def _measure_phase(
    publisher: WhipPublisher, viewer: WhepViewer, name: str, seconds: float
) -> WhipPhase:
    await asyncio.sleep(WARMUP_SECONDS)
    published, received, stamped = publisher.track.sent, viewer.frames_received, len(viewer.latencies_ms)
    await asyncio.sleep(seconds)
    phase = summarise_whip_phase(
        name,
        seconds,
        publisher.track.sent - published,
        viewer.frames_received - received,
        viewer.latencies_ms[stamped:],
    )
    logger.info("phase %s: p50 %s ms, p95 %s ms, %d frames", name, phase.p50_ms, phase.p95_ms, phase.received)
    return phase


async def _set_source(
    base_url: str, session_id: str, image: bytes, content_type: str, settings: dict[str, Any]
) -> None:
    async with aiohttp.ClientSession() as http:
        session_url = f"{base_url}/api/sessions/{session_id}"
        async with http.patch(f"{session_url}/settings", json=settings) as response:
            if response.status != 200:
                raise ValueError(f"settings refused: {response.status} {await response.text()}")
        async with http.put(
            f"{session_url}/source", data=image, headers={"Content-Type": content_type}
        ) as response:
            if response.status != 200:
                raise ValueError(f"source refused: {response.status} {await response.text()}")


async def measure_whip(
    base_url: str,
    frames: list[Frame],
    source_image: bytes,
    source_type: str,
    settings: dict[str, Any],
    seconds: float,
) -> list[WhipPhase]:
    """Passthrough then swapping, on one WHIP stream watched by one WHEP viewer."""
    async with WhipPublisher(
        base_url, lambda index: frames[index % len(frames)], fps=FPS, stamp_mode="clock"
    ) as publisher:
        assert publisher.session_id is not None
        async with WhepViewer(base_url, publisher.session_id, keep_frames=1) as viewer:
            await viewer.wait_for_frames(1, timeout=20.0)
            passthrough = await _measure_phase(publisher, viewer, "passthrough", seconds)
            await _set_source(base_url, publisher.session_id, source_image, source_type, settings)
            swapping = await _measure_phase(publisher, viewer, str(settings.get("engine", "swap")), seconds)
    return [passthrough, swapping]


def run_whip(args: argparse.Namespace) -> int:
    seconds = args.seconds if args.seconds is not None else DEFAULT_SECONDS
    settings: dict[str, Any] = {"engine": args.engine if args.engine != "auto" else "mesh"}
    with loopback_bench(args, "whip") as bench:
        phases = asyncio.run(
            measure_whip(bench.url, bench.frames, bench.source_image, bench.source_type, settings, seconds)
        )
    size = f"{args.width}x{args.height}"
    machine = machine_description()
    header = (
        f"whip -> whep: {size} @ {FPS:.0f} fps, {face_size_label(face_size_from_args(args))}, H264 in, {seconds:.0f} s per phase after "
        f"{WARMUP_SECONDS:.0f} s warm-up, loopback, provider {args.execution_provider}, {machine}"
    )
    sys.stdout.write(format_whip_table(phases, header) + "\n")
    if getattr(args, "output", None):
        report = {"kind": "whip", "size": size, "fps": FPS, "seconds": seconds, "machine": machine}
        report["phases"] = [asdict(phase) for phase in phases]
        Path(args.output).write_text(json.dumps(report, indent=2))
    return 0
