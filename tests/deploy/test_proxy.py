"""Issue 11 item 4: two daemon processes (real models, --max-sessions 2, a token, each with its own
--public-url) behind a real HAProxy running the committed deploy/haproxy/haproxy.cfg, all on 127.0.0.1.

New calls at the shared name spread over both daemons; a call's later requests (source, stats, DELETE;
WHIP PATCH and DELETE; WHEP) follow the absolute Location it was given to the daemon that holds it, even
while that daemon is full; a full daemon fails HAProxy's /ready check and gets no new call; with both
full HAProxy refuses new calls; a DELETE frees its session on its own daemon (the HPA's gauge says so)
and that daemon takes calls again.

The daemons' host names (*.livefuse.test: a reserved name that never resolves on the Internet) resolve to
127.0.0.1 in this process only, as wildcard DNS would send them to the proxy.
"""

import asyncio
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection

from bench.clients.daemon_process import DaemonProcess, free_loopback_port
from bench.clients.peer_client import PeerClient
from bench.clients.whip_client import WhepViewer, WhipPublisher
from streamer.outputs.frame_stamp import STAMP_HEIGHT
from streamer.transport.ice_addresses import restrict_ice_addresses
from tests.conftest import REPO_ROOT
from tests.integration.daemon_harness import camera_frame

CONFIG = REPO_ROOT / "deploy" / "haproxy" / "haproxy.cfg"
DOMAIN = "livefuse.test"
DAEMONS = ("livefuse-0", "livefuse-1")
TOKEN = "proxy-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_SESSIONS = 2
STATE_TIMEOUT_S = 10.0  # the config checks every 2 s
FPS = 5


@dataclass
class Cluster:
    port: int
    stats_socket: Path
    daemons: dict[str, DaemonProcess]
    haproxy_log: Path

    @property
    def entry(self) -> str:
        """Where new calls go (the page's origin, OBS's WHIP URL)."""
        return f"http://{DOMAIN}:{self.port}"

    def url_of(self, daemon: str) -> str:
        """The daemon's --public-url: through the proxy, to that daemon only."""
        return f"http://{daemon}.{DOMAIN}:{self.port}"

    def daemon_of(self, url: str | None) -> str:
        assert url is not None
        match = re.match(rf"^http://(livefuse-\d)\.{re.escape(DOMAIN)}:{self.port}/", url)
        assert match is not None, f"{url} does not name a daemon"
        return match[1]

    def server_states(self) -> dict[str, str]:
        """HAProxy's view of the new-calls backend (`show stat` on the admin socket): name -> UP/DOWN."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as admin:
            admin.connect(str(self.stats_socket))
            admin.sendall(b"show stat\n")
            data = b""
            while chunk := admin.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        header = lines[0].removeprefix("# ").split(",")
        rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
        return {row["svname"]: row["status"] for row in rows if row["pxname"] == "new-calls"}

    async def wait_for_state(self, daemon: str, state: str) -> None:
        deadline = time.monotonic() + STATE_TIMEOUT_S
        while (current := self.server_states()[daemon]) != state:
            assert time.monotonic() < deadline, (
                f"HAProxy still sees {daemon} {current}, not {state}:\n{self.haproxy_log.read_text()[-3000:]}"
            )
            await asyncio.sleep(0.1)


def resolve_test_names(original: Any) -> Any:
    """getaddrinfo that sends *.livefuse.test to 127.0.0.1 (and everything else where it went)."""

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and (host == DOMAIN or host.endswith("." + DOMAIN)):
            host = "127.0.0.1"
        return original(host, *args, **kwargs)

    return getaddrinfo


def start_haproxy(port: int, daemons: dict[str, DaemonProcess], workdir: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ) | {
        "LIVEFUSE_PROXY_BIND": f"127.0.0.1:{port}",
        "LIVEFUSE_PROXY_STATS_SOCKET": str(workdir / "haproxy.sock"),
    }
    for index, (name, daemon) in enumerate(daemons.items()):
        env |= {
            f"LIVEFUSE_{index}_ADDR": f"127.0.0.1:{daemon.port}",
            f"LIVEFUSE_{index}_HOST": f"{name}.{DOMAIN}",
        }
    check = subprocess.run(
        ["haproxy", "-c", "-f", str(CONFIG)], env=env, capture_output=True, timeout=30, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    with (workdir / "haproxy.log").open("wb") as log:
        process = subprocess.Popen(["haproxy", "-db", "-f", str(CONFIG)], env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 10
    while not (workdir / "haproxy.sock").exists():
        assert process.poll() is None and time.monotonic() < deadline, (workdir / "haproxy.log").read_text()
        time.sleep(0.05)
    return process


def daemon_args(name: str, port: int) -> tuple[str, ...]:
    """What each pod of deploy/kubernetes runs with, on the CPU: its own public URL, a small capacity."""
    public_url = f"http://{name}.{DOMAIN}:{port}"
    limits = ("--max-sessions", str(MAX_SESSIONS), "--token", TOKEN, "--trusted-proxies", "127.0.0.1")
    return ("--public-url", public_url, *limits, "--engine", "mesh", "--execution-provider", "cpu")


@pytest.fixture(scope="module")
def cluster(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if shutil.which("haproxy") is None:
        pytest.skip("Debian haproxy is not installed (apt-get install haproxy; .ci/run installs it)")
    workdir = tmp_path_factory.mktemp("proxy")
    port = free_loopback_port()
    daemons = {
        name: DaemonProcess(models_dir, workdir / f"{name}.log", extra_args=daemon_args(name, port))
        for name in DAEMONS
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket, "getaddrinfo", resolve_test_names(socket.getaddrinfo))
        haproxy = None
        try:
            with ThreadPoolExecutor(len(daemons)) as pool:  # both load their models at once
                list(pool.map(DaemonProcess.start, daemons.values()))
            haproxy = start_haproxy(port, daemons, workdir)
            yield Cluster(port, workdir / "haproxy.sock", daemons, workdir / "haproxy.log")
        finally:
            if haproxy is not None:
                haproxy.terminate()
                haproxy.wait(timeout=10)
            for daemon in daemons.values():
                daemon.close()


async def active_sessions(cluster: Cluster, daemon: str) -> int:
    """The HPA's gauge, scraped through the proxy from that daemon alone."""
    async with (
        aiohttp.ClientSession(headers=AUTH) as http,
        http.get(f"{cluster.url_of(daemon)}/metrics") as response,
    ):
        assert response.status == 200
        match = re.search(r"^livefuse_active_sessions (\d+)", await response.text(), re.MULTILINE)
        assert match is not None
        return int(match[1])


async def offer_status(url: str) -> int:
    """The status a new call gets at `url` (its peer closed at once: only the answer's status counts)."""
    restrict_ice_addresses(["127.0.0.1"])
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        pc.addTransceiver("video", direction="sendrecv")
        await pc.setLocalDescription(await pc.createOffer())
        offer = {"sdp": pc.localDescription.sdp, "type": "offer"}
        async with (
            aiohttp.ClientSession(headers=AUTH) as http,
            http.post(f"{url}/api/sessions", json=offer) as response,
        ):
            return response.status
    finally:
        await pc.close()


def swapped(received: np.ndarray, camera: np.ndarray) -> bool:
    mask = np.abs(received.astype(np.int16) - camera.astype(np.int16)).mean(axis=2) > 40
    mask[:STAMP_HEIGHT] = False
    return int(mask.sum()) > 2000


async def test_calls_spread_full_daemons_are_skipped_and_each_delete_frees_its_own_daemon(
    cluster: Cluster, media_dir: Path
) -> None:
    frame = camera_frame(media_dir)
    calls: list[PeerClient] = []

    async def call(url: str) -> PeerClient:
        client = PeerClient(url, frame, fps=FPS, keep_frames=1, token=TOKEN)
        await client.__aenter__()
        calls.append(client)
        return client

    for daemon in DAEMONS:
        await cluster.wait_for_state(daemon, "UP")
    try:
        first, second = await call(cluster.entry), await call(cluster.entry)
        x, y = cluster.daemon_of(first.session_url), cluster.daemon_of(second.session_url)
        assert {x, y} == set(DAEMONS), "two new calls went to the two daemons"

        # the first call's later requests follow its Location to its daemon: source, then swapped video
        await first.upload_source((media_dir / "fr_biden2.jpg").read_bytes())
        mark = len(first.received)
        await first.wait_for_frames(mark + 10, timeout=30)
        assert swapped(first.frames[-1][1], frame)
        async with (
            aiohttp.ClientSession(headers=AUTH) as http,
            http.get(f"{cluster.url_of(y)}/api/sessions/{first.session_id}") as response,
        ):
            assert response.status == 404, "the other daemon does not hold it: only its Location does"

        # x fills up (a second call straight to its own host): its /ready turns 503 and HAProxy drops it
        third = await call(cluster.url_of(x))
        assert cluster.daemon_of(third.session_url) == x
        await cluster.wait_for_state(x, "DOWN")
        assert cluster.server_states()[y] == "UP"
        fourth = await call(cluster.entry)
        assert cluster.daemon_of(fourth.session_url) == y, "the full daemon was skipped"
        await cluster.wait_for_state(y, "DOWN")
        assert await offer_status(cluster.entry) == 503, "no daemon has room: HAProxy refuses new calls"

        # full daemons still answer their own calls' requests through their own host names
        for client in calls:
            assert (await client.session_stats())["frames_in"] > 0
        assert [await active_sessions(cluster, daemon) for daemon in (x, y)] == [2, 2]

        # DELETE (through the Location) frees the session on its own daemon, which takes calls again
        await first.close()
        calls.remove(first)
        assert [await active_sessions(cluster, daemon) for daemon in (x, y)] == [1, 2]
        await cluster.wait_for_state(x, "UP")
        fifth = await call(cluster.entry)
        assert cluster.daemon_of(fifth.session_url) == x
    finally:
        await asyncio.gather(*(client.close() for client in calls))
    assert [await active_sessions(cluster, daemon) for daemon in DAEMONS] == [0, 0]


async def test_whip_patch_delete_and_whep_reach_the_daemon_that_holds_the_stream(
    cluster: Cluster, media_dir: Path
) -> None:
    frame = camera_frame(media_dir)
    for daemon in DAEMONS:
        await cluster.wait_for_state(daemon, "UP")
    async with WhipPublisher(cluster.entry, frame, fps=FPS, audio=False, token=TOKEN) as publisher:
        holder = cluster.daemon_of(publisher.resource_url)
        assert publisher.resource_url == f"{cluster.url_of(holder)}/whip/{publisher.session_id}"
        assert await active_sessions(cluster, holder) == 1
        async with aiohttp.ClientSession(headers=AUTH) as http:
            trickle = {"Content-Type": "application/trickle-ice-sdpfrag"}
            async with http.patch(
                publisher.resource_url, data="a=end-of-candidates\r\n", headers=trickle
            ) as patch:
                assert patch.status == 204
        # a viewer watches at the daemon the WHIP Location names (OBS: /view/{id} on that host)
        async with WhepViewer(
            cluster.url_of(holder), str(publisher.session_id), audio=False, token=TOKEN
        ) as viewer:
            assert cluster.daemon_of(viewer.resource_url) == holder
            await viewer.wait_for_frames(5, timeout=30)
    # the publisher's DELETE went to its Location: the stream is gone from its daemon
    assert [await active_sessions(cluster, daemon) for daemon in DAEMONS] == [0, 0]
