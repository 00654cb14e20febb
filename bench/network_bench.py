"""`run_stream.py bench --live --loss 0.05 --cut 2 [--cap-kbps 500]`: one swapped call through the real
daemon over loopback WebRTC with a bad network between them (bench/clients/lossy_network.py at the
client's ICE sockets, both directions; the kernel's netem is not available here).

Reported: frames back (received / sent), latency p50 and p95 (counter stamps: send time -> receive
time on one clock), the longest gap between frames, and after a cut (placed in the middle of the
window) the time from the path's return to the first frame back that was sent after it; and whether the
daemon kept the session. These are the figures of docs/benchmarks.md "Live call on a bad network";
tests/integration/test_network_recovery.py asserts the behaviour with generous bounds.
"""

import argparse
import asyncio
import json
import logging
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.clients.call_quality import CallQuality, call_quality
from bench.clients.frames import machine_description
from bench.clients.lossy_network import LinkConditions, LossyNetwork
from bench.clients.peer_client import PeerClient
from bench.live_bench import FPS, WARMUP_SECONDS, loopback_bench

logger = logging.getLogger(__name__)

DEFAULT_SECONDS = 10.0


async def measure_network_call(
    base_url: str,
    frames: list[Any],
    source_image: bytes,
    source_type: str,
    settings: dict[str, Any],
    conditions: LinkConditions,
    cut_s: float,
    seconds: float,
) -> tuple[CallQuality, bool, dict[str, dict[str, int]]]:
    """One call: warm-up on a clean path, then `seconds` under `conditions` with a cut of `cut_s` in
    the middle; (quality, session still open, link counters)."""
    async with PeerClient(base_url, lambda index: frames[index % len(frames)], fps=FPS) as client:
        await client.wait_for_frames(1, timeout=30.0)
        await client.patch_settings(settings)
        await client.upload_source(source_image, source_type)
        await asyncio.sleep(WARMUP_SECONDS)
        assert client.pc is not None
        network = LossyNetwork(conditions, seed=21)
        network.attach(client.pc)
        try:
            since, sent_before = len(client.received), client.track.sent
            path_back_ms = None
            if cut_s > 0:
                _, end_s = network.schedule_cut(max(0.0, (seconds - cut_s) / 2), cut_s)
                path_back_ms = end_s * 1000.0
            await asyncio.sleep(seconds)
            quality = call_quality(client, since, sent_before, path_back_ms)
            try:
                await client.session_stats()
                still_open = True
            except ValueError:
                still_open = False
        finally:
            network.detach()
        return quality, still_open, network.describe()


def run_network(args: argparse.Namespace) -> int:
    seconds = args.seconds if args.seconds is not None else DEFAULT_SECONDS
    conditions = LinkConditions(loss=args.loss, rate_kbps=args.cap_kbps)
    settings: dict[str, Any] = {"engine": args.engine if args.engine != "auto" else "mesh"}
    with loopback_bench(args, "network") as bench:
        quality, still_open, link = asyncio.run(
            measure_network_call(
                bench.url,
                bench.frames,
                bench.source_image,
                bench.source_type,
                settings,
                conditions,
                args.cut,
                seconds,
            )
        )
    cap = f", cap {args.cap_kbps:g} kbit/s" if args.cap_kbps else ""
    header = (
        f"live on a bad network: {args.width}x{args.height} @ {FPS:.0f} fps, {settings['engine']}, loss "
        f"{args.loss:.0%} each way, cut {args.cut:g} s{cap}, {seconds:.0f} s, {machine_description()}"
    )
    session = "kept" if still_open else "ENDED by the daemon"
    sys.stdout.write(f"{header}\n{quality.describe()}; session {session}\n")
    if getattr(args, "output", None):
        report = {
            "kind": "live-network",
            "conditions": asdict(conditions),
            "cut_s": args.cut,
            "seconds": seconds,
            "quality": asdict(quality),
            "session_kept": still_open,
            "link": link,
            "machine": machine_description(),
        }
        Path(args.output).write_text(json.dumps(report, indent=2))
    return 0
