"""`run_stream.py serve` as a process with the real models: ready, a real swap over WebRTC, and a clean
exit on SIGTERM with the session closed."""

import asyncio
import json
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import numpy as np

from bench.clients.peer_client import PeerClient
from streamer.outputs.frame_stamp import STAMP_HEIGHT
from tests.integration.daemon_harness import camera_frame

REPO_ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _wait_ready(url: str, process: asyncio.subprocess.Process, timeout: float = 20.0) -> None:
    async with aiohttp.ClientSession() as http, asyncio.timeout(timeout):
        while True:
            assert process.returncode is None, "the daemon exited during start-up"
            try:
                async with http.get(f"{url}/ready") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.2)


async def test_serve_swaps_with_real_models_and_stops_on_sigterm(models_dir: Path, media_dir: Path) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "run_stream.py", "serve", "--port", str(port), "--ice-address", "127.0.0.1"]
    command += ["--models-dir", str(models_dir), "--engine", "mesh"]
    process = await asyncio.create_subprocess_exec(*command, cwd=REPO_ROOT, stderr=asyncio.subprocess.PIPE)
    try:
        await _wait_ready(url, process)
        frame = camera_frame(media_dir)
        async with PeerClient(url, frame, fps=15, keep_frames=1) as client:
            await client.wait_for_frames(10, timeout=15)
            await client.upload_source((media_dir / "fr_biden2.jpg").read_bytes())
            mark = len(client.received)
            await client.wait_for_frames(mark + 30, timeout=20)
            _, swapped = client.frames[-1]
            difference = np.abs(swapped.astype(np.int16) - frame.astype(np.int16)).mean(axis=2)
            difference[:STAMP_HEIGHT] = 0  # the stamp strip differs by design (and is checked by reading it)
            changed = int((difference > 40).sum())  # codec noise stays far below 40 levels
            assert changed > 2000, f"no swapped face: only {changed} pixels changed"
            result = client.result(since=mark)
            assert result.duplicates == 0 and result.out_of_order == 0 and result.unreadable == 0
            session_id = client.session_id
            process.send_signal(signal.SIGTERM)  # shut down while the call is live
            _, stderr = await asyncio.wait_for(process.communicate(), 15)
        assert process.returncode == 0
        events = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
        closed = [e for e in events if e.get("event") == "closed" and e.get("session_id") == session_id]
        assert closed, "the session was not closed on shutdown"
        assert any(e.get("event") == "shutdown" and e.get("logger") == "web.engine" for e in events)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
