"""Four concurrent sessions with four different sources through the real mesh pipeline: each session's
received face is its own swap (they differ from the camera and from each other)."""

import asyncio
import itertools
from pathlib import Path

import numpy as np
import pytest

from bench.clients.peer_client import PeerClient
from run_stream import build_parser
from streamer.outputs.frame_stamp import STAMP_HEIGHT
from tests.integration.daemon_harness import camera_frame, running_daemon
from web.serve import load_pipeline_binding

SOURCES = (
    "fr_biden2.jpg",
    "fr_alex_lacamoire1.jpg",
    "fr_lin_manuel_miranda.png",
    "insightface_tom_hanks_112.png",
)


@pytest.mark.slow
async def test_four_sessions_four_real_swaps(models_dir: Path, media_dir: Path) -> None:
    args = build_parser().parse_args(["serve", "--models-dir", str(models_dir), "--engine", "mesh"])
    binding = await asyncio.to_thread(load_pipeline_binding, args)
    frame = camera_frame(media_dir)
    async with running_daemon(binding) as (url, _engine):
        # 8 fps each: four real swaps plus encode/decode on both ends share this machine's 2 cores
        clients = [PeerClient(url, frame, fps=8, keep_frames=1) for _ in SOURCES]
        try:
            for client in clients:
                await client.__aenter__()
            for client, name in zip(clients, SOURCES):
                content_type = "image/png" if name.endswith(".png") else "image/jpeg"
                await client.upload_source((media_dir / name).read_bytes(), content_type)
            marks = [len(client.received) for client in clients]
            await asyncio.gather(*(c.wait_for_frames(m + 16, timeout=25) for c, m in zip(clients, marks)))
            received = [client.frames[-1][1].astype(np.int16) for client in clients]
            for client, mark in zip(clients, marks):
                result = client.result(since=mark)
                assert result.duplicates == 0 and result.out_of_order == 0 and result.unreadable == 0
        finally:
            await asyncio.gather(*(client.close() for client in clients))

    camera = frame.astype(np.int16)
    changed = [np.abs(image - camera).mean(axis=2) > 40 for image in received]
    for mask in changed:
        mask[:STAMP_HEIGHT] = False
    for name, mask in zip(SOURCES, changed):
        assert mask.sum() > 2000, f"{name}: the face was not swapped ({mask.sum()} pixels changed)"
    face = np.logical_or.reduce(changed)
    for (i, a), (j, b) in itertools.combinations(enumerate(received), 2):
        difference = float(np.abs(a - b).mean(axis=2)[face].mean())
        assert difference > 8, f"sessions {SOURCES[i]} and {SOURCES[j]} got the same face ({difference:.1f})"
