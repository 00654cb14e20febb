"""`run_stream.py bench --live`: glass-to-glass latency through the real daemon over loopback WebRTC.

The daemon runs as a child process (DaemonProcess); streamer/bench/peer_client.py sends a moving face at the
requested size and 30 fps with a millisecond clock stamped into every frame and reads the stamp back
from what returns, so latency = receive time - send time on one clock: encode, network, daemon
(decode, newest-frame mailbox, swap, encode), network, decode. Two phases on one call: passthrough
(no source) and swapping (source set, mesh engine unless --engine names another; --enhancer adds GFPGAN).
"""

import argparse
import asyncio
import json
import logging
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from models.face import Frame
from models.model_files import resolve_models_dir
from streamer.bench.daemon_process import DaemonProcess
from streamer.bench.frames import (
    TARGET_PHOTO,
    machine_description,
    media_dir_from_args,
    panning_face_frames,
    source_upload,
)
from streamer.bench.peer_client import LiveResult, PeerClient
from streamer.pipeline.image_input import read_image_file

logger = logging.getLogger(__name__)

FPS = 30.0
DEFAULT_SECONDS = 10.0
WARMUP_SECONDS = 2.0  # encoder ramp-up, source preparation and tracker lock-on are not steady state
MOTION_FRAMES = 90  # one panning cycle (3 s), looped


@dataclass(frozen=True)
class PhaseResult:
    """One measured phase; latencies in ms over frames whose stamp came back readable."""

    name: str
    seconds: float
    sent: int
    received: int
    unreadable: int
    duplicates: int
    out_of_order: int
    server_dropped: int
    fps_received: float
    p50_ms: float | None
    p95_ms: float | None
    max_ms: float | None
    # the worker's time for the batch holding each frame (RGB conversion + pipeline), p50 of the
    # session's last 120 frames: the "processing time" of the target "<= processing time + 1 frame"
    server_processing_ms: float | None = None


def summarise_phase(
    name: str,
    result: LiveResult,
    sent_before: int,
    seconds: float,
    server_dropped: int,
    server_processing_ms: float | None = None,
) -> PhaseResult:
    """A PhaseResult from the client's record of the phase (`sent_before`: frames sent before it began)."""
    latencies = result.latencies_ms
    return PhaseResult(
        name=name,
        seconds=seconds,
        sent=result.sent - sent_before,
        received=result.received,
        unreadable=result.unreadable,
        duplicates=result.duplicates,
        out_of_order=result.out_of_order,
        server_dropped=server_dropped,
        fps_received=result.received / seconds if seconds > 0 else 0.0,
        p50_ms=result.p50_ms,
        p95_ms=result.p95_ms,
        max_ms=float(max(latencies)) if latencies else None,
        server_processing_ms=server_processing_ms,
    )


def format_table(phases: list[PhaseResult], header: str) -> str:
    def ms(value: float | None) -> str:
        return f"{value:>8.1f}" if value is not None else f"{'-':>8}"

    lines = [
        header,
        (
            f"{'phase':<13}{'sent':>6}{'recv':>6}{'unread':>8}{'dropped':>9}{'fps':>7}"
            f"{'p50 ms':>8}{'p95 ms':>8}{'max ms':>8}{'server ms':>11}"
        ),
    ]
    for phase in phases:
        lines.append(
            f"{phase.name:<13}{phase.sent:>6}{phase.received:>6}{phase.unreadable:>8}{phase.server_dropped:>9}"
            f"{phase.fps_received:>7.1f}{ms(phase.p50_ms)}{ms(phase.p95_ms)}{ms(phase.max_ms)}"
            f"{ms(phase.server_processing_ms):>11}"
        )
    return "\n".join(lines)


async def _measure_phase(client: PeerClient, name: str, seconds: float) -> PhaseResult:
    await asyncio.sleep(WARMUP_SECONDS)
    since, sent_before = len(client.received), client.track.sent
    dropped_before = int((await client.session_stats()).get("frames_dropped", 0))
    await asyncio.sleep(seconds)
    stats = await client.session_stats()
    dropped_after = int(stats.get("frames_dropped", 0))
    processing = (stats.get("processing_ms") or {}).get("p50")
    phase = summarise_phase(
        name,
        client.result(since),
        sent_before,
        seconds,
        dropped_after - dropped_before,
        float(processing) if processing is not None else None,
    )
    logger.info("phase %s: p50 %s ms, p95 %s ms, %d frames", name, phase.p50_ms, phase.p95_ms, phase.received)
    return phase


async def measure_live(
    base_url: str,
    frames: list[Frame],
    source_image: bytes,
    source_type: str,
    settings: dict[str, Any],
    seconds: float,
) -> list[PhaseResult]:
    """Passthrough then swapping, on one call to the daemon at `base_url`."""
    async with PeerClient(
        base_url, lambda index: frames[index % len(frames)], fps=FPS, stamp_mode="clock"
    ) as client:
        await client.wait_for_frames(1, timeout=20.0)
        passthrough = await _measure_phase(client, "passthrough", seconds)
        await client.patch_settings(settings)
        await client.upload_source(source_image, source_type)
        name = str(settings.get("engine", "swap")) + ("+enhancer" if settings.get("enhancer") else "")
        swapping = await _measure_phase(client, name, seconds)
    return [passthrough, swapping]


def daemon_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The bench's model flags, passed on to the daemon it starts (`--live` and `--whip` alike)."""
    return (
        "--execution-provider", args.execution_provider, "--device-id", str(args.device_id),
        "--detector", args.detector, "--swapper-model", args.swapper_model,
    )  # fmt: skip


@dataclass(frozen=True)
class LoopbackBench:
    """What a loopback bench (`--live`, `--whip`) has once its daemon is ready: where it listens, the
    panning face frames to send and the source photo to upload."""

    url: str
    frames: list[Frame]
    source_image: bytes
    source_type: str


@contextmanager
def loopback_bench(args: argparse.Namespace, name: str) -> Iterator[LoopbackBench]:
    """A daemon child process with the bench's model flags, and the inputs both loopback benches send."""
    media = media_dir_from_args(args)
    models_dir = resolve_models_dir(args.models_dir)
    frames = panning_face_frames(
        read_image_file(media / TARGET_PHOTO), args.width, args.height, MOTION_FRAMES
    )
    source_image, source_type = source_upload(media)
    with (
        tempfile.TemporaryDirectory(prefix=f"livefuse-{name}-bench-") as scratch,
        DaemonProcess(models_dir, Path(scratch) / "daemon.log", extra_args=daemon_args(args)) as daemon,
    ):
        yield LoopbackBench(daemon.url, frames, source_image, source_type)


def run_live(args: argparse.Namespace) -> int:
    seconds = args.seconds if args.seconds is not None else DEFAULT_SECONDS
    settings: dict[str, Any] = {"engine": args.engine if args.engine != "auto" else "mesh"}
    if args.enhancer:
        settings["enhancer"] = True
    with loopback_bench(args, "live") as bench:
        phases = asyncio.run(
            measure_live(bench.url, bench.frames, bench.source_image, bench.source_type, settings, seconds)
        )

    size = f"{args.width}x{args.height}"
    machine = machine_description()
    header = (
        f"live: {size} @ {FPS:.0f} fps, {seconds:.0f} s per phase after {WARMUP_SECONDS:.0f} s warm-up, "
        f"loopback WebRTC, provider {args.execution_provider}, {machine}"
    )
    sys.stdout.write(format_table(phases, header) + "\n")
    if getattr(args, "output", None):
        report: dict[str, Any] = {
            "kind": "live",
            "size": size,
            "fps": FPS,
            "seconds": seconds,
            "warmup_seconds": WARMUP_SECONDS,
            "execution_provider": args.execution_provider,
            "machine": machine,
            "phases": [asdict(phase) for phase in phases],
        }
        Path(args.output).write_text(json.dumps(report, indent=2))
    return 0
