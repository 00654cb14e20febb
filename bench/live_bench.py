"""`run_stream.py bench --live`: glass-to-glass latency through the real daemon over loopback WebRTC.

The daemon runs as a child process (DaemonProcess); bench/clients/peer_client.py sends a moving face at the
requested size and 30 fps with a millisecond clock stamped into every frame and reads the stamp back
from what returns, so latency = receive time - send time on one clock: encode, network, daemon
(decode, newest-frame mailbox, swap, encode), network, decode. Two phases: passthrough (no source) and
swapping (source set, mesh engine unless --engine names another; --enhancer adds GFPGAN).

`--calls N` runs N calls at once (each reported on its own, with the p50 of its first and last quarter:
latency must not creep). `--baseline REV` runs the daemon of revision REV (a git worktree) and the
current one in alternating rounds (`--rounds`, order flipped every round), since this machine's speed
drifts too much for numbers taken at different times to compare.
"""

import argparse
import asyncio
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.clients.daemon_process import DaemonProcess
from bench.clients.frames import (
    TARGET_PHOTO,
    face_size_from_args,
    face_size_label,
    machine_description,
    media_dir_from_args,
    panning_face_frames,
    source_upload,
)
from bench.clients.peer_client import LiveResult, PeerClient
from bench.process_cpu import cpu_seconds
from bench.revision_checkout import revision_checkout
from models.face import Frame
from models.model_files import resolve_models_dir
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
    call: int = 0  # which of `--calls` concurrent calls
    first_quarter_p50_ms: float | None = None  # latency creeping up shows as last > first
    last_quarter_p50_ms: float | None = None
    # the daemon process's CPU during the phase (all calls), in % of one core: decode, swap, encode
    daemon_cpu_percent: float | None = None


def _quarter_medians(latencies: tuple[float, ...]) -> tuple[float | None, float | None]:
    quarter = len(latencies) // 4
    if quarter == 0:
        return None, None
    return float(np.median(latencies[:quarter])), float(np.median(latencies[-quarter:]))


def summarise_phase(
    name: str,
    result: LiveResult,
    sent_before: int,
    seconds: float,
    server_dropped: int,
    server_processing_ms: float | None = None,
    call: int = 0,
    daemon_cpu_percent: float | None = None,
) -> PhaseResult:
    """A PhaseResult from the client's record of the phase (`sent_before`: frames sent before it began)."""
    latencies = result.latencies_ms
    first_quarter, last_quarter = _quarter_medians(latencies)
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
        call=call,
        daemon_cpu_percent=daemon_cpu_percent,
        first_quarter_p50_ms=first_quarter,
        last_quarter_p50_ms=last_quarter,
    )


def format_table(phases: list[PhaseResult], header: str) -> str:
    def ms(value: float | None) -> str:
        return f"{value:>8.1f}" if value is not None else f"{'-':>8}"

    def percent(value: float | None) -> str:
        return f"{value:>7.0f}" if value is not None else f"{'-':>7}"

    several = any(phase.call for phase in phases)
    lines = [
        header,
        (
            f"{'phase':<13}{'sent':>6}{'recv':>6}{'unread':>8}{'dropped':>9}{'fps':>7}"
            f"{'p50 ms':>8}{'p95 ms':>8}{'max ms':>8}{'server ms':>11}{'q1 p50':>8}{'q4 p50':>8}{'cpu %':>7}"
        ),
    ]
    for phase in phases:
        name = f"{phase.name}#{phase.call + 1}" if several else phase.name
        lines.append(
            f"{name:<13}{phase.sent:>6}{phase.received:>6}{phase.unreadable:>8}{phase.server_dropped:>9}"
            f"{phase.fps_received:>7.1f}{ms(phase.p50_ms)}{ms(phase.p95_ms)}{ms(phase.max_ms)}"
            f"{ms(phase.server_processing_ms):>11}{ms(phase.first_quarter_p50_ms)}{ms(phase.last_quarter_p50_ms)}"
            f"{percent(phase.daemon_cpu_percent)}"
        )
    return "\n".join(lines)


async def _measure_phase(
    clients: list[PeerClient], name: str, seconds: float, daemon_pid: int | None = None
) -> list[PhaseResult]:
    """One phase on every call at once: warm-up, then `seconds` counted per call (and the daemon's CPU)."""
    await asyncio.sleep(WARMUP_SECONDS)
    marks = [(len(client.received), client.track.sent) for client in clients]
    dropped_before = [int(stats.get("frames_dropped", 0)) for stats in await _all_stats(clients)]
    cpu_before = cpu_seconds(daemon_pid) if daemon_pid is not None else None
    started = time.monotonic()
    await asyncio.sleep(seconds)
    cpu_after = cpu_seconds(daemon_pid) if daemon_pid is not None else None
    cpu_percent = None
    if cpu_before is not None and cpu_after is not None:
        cpu_percent = 100.0 * (cpu_after - cpu_before) / (time.monotonic() - started)
    phases = []
    for call, (client, (since, sent_before), before, stats) in enumerate(
        zip(clients, marks, dropped_before, await _all_stats(clients))
    ):
        processing = (stats.get("processing_ms") or {}).get("p50")
        phase = summarise_phase(
            name,
            client.result(since),
            sent_before,
            seconds,
            int(stats.get("frames_dropped", 0)) - before,
            float(processing) if processing is not None else None,
            call,
            cpu_percent,
        )
        logger.info(
            "phase %s call %d: %.1f fps, p50 %s ms, p95 %s ms", name, call, phase.fps_received,
            phase.p50_ms, phase.p95_ms,
        )  # fmt: skip
        phases.append(phase)
    return phases


async def _all_stats(clients: list[PeerClient]) -> list[dict[str, Any]]:
    """Each call's session stats; {} for a call whose session the daemon ended (logged, not fatal: the
    phase then shows what that call received)."""

    async def stats_of(call: int, client: PeerClient) -> dict[str, Any]:
        try:
            return await client.session_stats()
        except ValueError as error:
            logger.warning("call %d: no session stats (%s)", call, error)
            return {}

    return list(await asyncio.gather(*(stats_of(call, client) for call, client in enumerate(clients))))


async def measure_live(
    base_url: str,
    frames: list[Frame],
    source_image: bytes,
    source_type: str,
    settings: dict[str, Any],
    seconds: float,
    calls: int = 1,
    daemon_pid: int | None = None,
) -> list[PhaseResult]:
    """Passthrough then swapping, on `calls` concurrent calls to the daemon at `base_url` (process
    `daemon_pid`, whose CPU is read per phase when given)."""
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                PeerClient(base_url, lambda index: frames[index % len(frames)], fps=FPS, stamp_mode="clock")
            )
            for _ in range(calls)
        ]
        await asyncio.gather(*(client.wait_for_frames(1, timeout=20.0) for client in clients))
        passthrough = await _measure_phase(clients, "passthrough", seconds, daemon_pid)
        await asyncio.gather(*(client.patch_settings(settings) for client in clients))
        await asyncio.gather(*(client.upload_source(source_image, source_type) for client in clients))
        name = str(settings.get("engine", "swap")) + ("+enhancer" if settings.get("enhancer") else "")
        swapping = await _measure_phase(clients, name, seconds, daemon_pid)
    return passthrough + swapping


# the bench's model and swap flags the daemon it starts gets too: (argparse dest, flag, its default)
DAEMON_FLAGS: tuple[tuple[str, str, object], ...] = (
    ("execution_provider", "--execution-provider", "auto"),
    ("device_id", "--device-id", 0),
    ("detector", "--detector", "yunet_n"),
    ("swapper_model", "--swapper-model", "inswapper_128"),
    ("intra_op_threads", "--intra-op-threads", 0),
    ("engine", "--engine", "auto"),
    ("face_selector", "--face-selector", "many"),
    ("reference_face", "--reference-face", None),
    ("reference_distance", "--reference-distance", 0.6),
    ("enhancer", "--enhancer", False),
    ("no_mouth_mask", "--no-mouth-mask", False),
    ("no_occlusion", "--no-occlusion", False),
)


def daemon_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The bench's model and swap flags, passed on to the daemon it starts (`--live` and `--whip`), each
    only when it differs from its default: an older `--baseline` daemon may not know a newer flag."""
    forwarded: list[str] = []
    for dest, flag, default in DAEMON_FLAGS:
        value = getattr(args, dest, default)
        if value == default:
            continue
        if isinstance(value, bool):
            forwarded.append(flag)
        else:
            forwarded += [flag, str(Path(str(value)).resolve()) if dest == "reference_face" else str(value)]
    return tuple(forwarded)


@dataclass(frozen=True)
class LoopbackBench:
    """What a loopback bench (`--live`, `--whip`) has once its daemon is ready: where it listens, the
    panning face frames to send and the source photo to upload."""

    url: str
    frames: list[Frame]
    source_image: bytes
    source_type: str
    pid: int | None = None  # the daemon process


@contextmanager
def loopback_bench(
    args: argparse.Namespace, name: str, run_stream: Path | None = None
) -> Iterator[LoopbackBench]:
    """A daemon child process with the bench's model flags, and the inputs both loopback benches send;
    `run_stream`: the daemon of another checkout (`--baseline`)."""
    media = media_dir_from_args(args)
    models_dir = resolve_models_dir(args.models_dir).resolve()  # the daemon may run in another checkout
    frames = panning_face_frames(
        read_image_file(media / TARGET_PHOTO),
        args.width,
        args.height,
        MOTION_FRAMES,
        face_size_from_args(args),
    )
    source_image, source_type = source_upload(media)
    with (
        tempfile.TemporaryDirectory(prefix=f"livefuse-{name}-bench-") as scratch,
        DaemonProcess(
            models_dir, Path(scratch) / "daemon.log", extra_args=daemon_args(args), run_stream=run_stream
        ) as daemon,
    ):
        yield LoopbackBench(daemon.url, frames, source_image, source_type, daemon.pid)


@dataclass(frozen=True)
class LiveRun:
    """One daemon's phases: `label` is "current" or "baseline <commit>"; `round` counts from 0."""

    label: str
    round: int
    phases: list[PhaseResult]


def _swap_summary(runs: list[LiveRun]) -> dict[str, dict[str, float | None]]:
    """Per label: medians over rounds (and calls) of the swapping phase's fps, p50, p95."""

    def median(values: list[float | None]) -> float | None:
        known = [value for value in values if value is not None]
        return round(statistics.median(known), 1) if known else None

    summary: dict[str, dict[str, float | None]] = {}
    for label in dict.fromkeys(run.label for run in runs):
        swapping = [
            phase for run in runs if run.label == label for phase in run.phases if phase.name != "passthrough"
        ]
        passthrough = [
            phase for run in runs if run.label == label for phase in run.phases if phase.name == "passthrough"
        ]
        summary[label] = {
            "fps": median([phase.fps_received for phase in swapping]),
            "p50_ms": median([phase.p50_ms for phase in swapping]),
            "p95_ms": median([phase.p95_ms for phase in swapping]),
            "passthrough_p50_ms": median([phase.p50_ms for phase in passthrough]),
            "daemon_cpu_percent": median([phase.daemon_cpu_percent for phase in swapping]),
        }
    return summary


def run_live(args: argparse.Namespace) -> int:
    seconds = args.seconds if args.seconds is not None else DEFAULT_SECONDS
    settings: dict[str, Any] = {"engine": args.engine if args.engine != "auto" else "mesh"}
    if args.enhancer:
        settings["enhancer"] = True
    calls = max(1, getattr(args, "calls", 1))
    baseline = getattr(args, "baseline", None)
    runs: list[LiveRun] = []
    with ExitStack() as stack:
        daemons: list[tuple[str, Path | None]] = [("current", None)]
        if baseline:
            folder, commit = stack.enter_context(revision_checkout(baseline))
            daemons.insert(0, (f"baseline {commit}", folder / "run_stream.py"))
        for round_index in range(args.rounds if baseline else 1):
            order = daemons if round_index % 2 == 0 else daemons[::-1]  # ABBA: drift hits both alike
            for label, entry in order:
                with loopback_bench(args, "live", run_stream=entry) as bench:
                    phases = asyncio.run(
                        measure_live(
                            bench.url,
                            bench.frames,
                            bench.source_image,
                            bench.source_type,
                            settings,
                            seconds,
                            calls,
                            bench.pid,
                        )
                    )
                runs.append(LiveRun(label, round_index, phases))

    size = f"{args.width}x{args.height}"
    machine = machine_description()
    header = (
        f"live: {size} @ {FPS:.0f} fps, {face_size_label(face_size_from_args(args))}, {calls} call(s), {seconds:.0f} s per phase after {WARMUP_SECONDS:.0f} s "
        f"warm-up, loopback WebRTC, provider {args.execution_provider}, {machine}"
    )
    for run in runs:
        title = header if not baseline else f"{header}\n[{run.label}, round {run.round + 1}]"
        sys.stdout.write(format_table(run.phases, title) + "\n")
    summary = _swap_summary(runs) if baseline else None
    if summary is not None:
        for label, figures in summary.items():
            sys.stdout.write(f"median over rounds, {label}: {figures}\n")
    if getattr(args, "output", None):
        report: dict[str, Any] = {
            "kind": "live",
            "size": size,
            "face_share": round(face_size_from_args(args), 4),
            "fps": FPS,
            "calls": calls,
            "seconds": seconds,
            "warmup_seconds": WARMUP_SECONDS,
            "execution_provider": args.execution_provider,
            "machine": machine,
            "phases": [asdict(phase) for phase in runs[-1].phases],
        }
        if baseline:
            report["runs"] = [asdict(run) for run in runs]
            report["summary"] = summary
        Path(args.output).write_text(json.dumps(report, indent=2))
    return 0
