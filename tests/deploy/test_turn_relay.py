"""Issue 11 item 2, end to end: a call whose ICE may use relay candidates only, through a real coturn
started from the deployment's template on 127.0.0.1, gets swapped frames back.

- coturn: deploy/kubernetes/base/turnserver.conf via start-coturn.sh (tests/deploy/coturn.py), with
  loopback peers let back in (the template refuses them, as it must in a cluster).
- The daemon: a separate process with the real models, `--ice-servers stun:...,turn:...`, the shared
  secret in $LIVEFUSE_TURN_SECRET, `--ice-port-range` and a token: the way the manifests run it.
- The client asks the daemon for its ICE servers (GET /api/ice-servers: a TURN REST credential made from
  the secret) and sets the relay-only policy (aioice then gathers no host and no server-reflexive
  candidate), so every packet it sends goes through coturn. aiortc exposes no selected candidate pair in
  getStats, so the nominated pair is read from its ICE connection.
- A WHEP viewer of the call, relay-only as well, gets the swapped video too (the daemon's viewer peers use
  the ICE servers) and the TURN credential in RFC 9725 Link headers.
"""

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aioice.ice import CandidatePair
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection
from aiortc.rtcconfiguration import RTCIceTransportPolicy

from bench.clients.daemon_process import DaemonProcess
from bench.clients.peer_client import PeerClient
from bench.clients.whip_client import WhepViewer
from streamer.outputs.frame_stamp import STAMP_HEIGHT
from tests.deploy.coturn import LOOPBACK_ALLOWED_PEER_IP, LOOPBACK_PEERS, running_coturn
from tests.integration.daemon_harness import camera_frame
from tests.loopback_ice import free_udp_range

TOKEN = "relay-test-token"
SOURCE = "fr_biden2.jpg"
CANDIDATE = re.compile(
    r"^a=candidate:\S+ \d+ udp \d+ (?P<ip>\S+) (?P<port>\d+) typ (?P<type>\w+)", re.MULTILINE
)


def candidates(sdp: str) -> list[dict[str, str]]:
    return [match.groupdict() for match in CANDIDATE.finditer(sdp)]


def nominated_pair(pc: RTCPeerConnection) -> CandidatePair:
    """The candidate pair media flows on (aiortc bundles everything on the first transport)."""
    ice_transport = pc.getTransceivers()[0].receiver.transport.transport
    pair: CandidatePair = ice_transport._connection._nominated[1]
    return pair


async def fetch_ice_servers(url: str) -> list[dict[str, Any]]:
    """What the page asks for before each call."""
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
        http.get(f"{url}/api/ice-servers") as response,
    ):
        assert response.status == 200
        servers: list[dict[str, Any]] = (await response.json())["iceServers"]
        return servers


def relay_only(servers: list[dict[str, Any]]) -> RTCConfiguration:
    ice_servers = [RTCIceServer(**server) for server in servers]
    return RTCConfiguration(iceServers=ice_servers, iceTransportPolicy=RTCIceTransportPolicy.RELAY)


def changed_pixels(received: np.ndarray, camera: np.ndarray) -> int:
    mask = np.abs(received.astype(np.int16) - camera.astype(np.int16)).mean(axis=2) > 40
    mask[:STAMP_HEIGHT] = False
    return int(mask.sum())


async def test_a_call_forced_onto_relay_candidates_gets_swapped_frames_back(
    tmp_path: Path, models_dir: Path, media_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = free_udp_range(10)
    with running_coturn(tmp_path, *LOOPBACK_PEERS, allowed_peer_ip=LOOPBACK_ALLOWED_PEER_IP) as coturn:
        monkeypatch.setenv("LIVEFUSE_TURN_SECRET", coturn.secret)  # as the manifests pass it: not in `ps`
        urls = f"stun:127.0.0.1:{coturn.port},turn:127.0.0.1:{coturn.port}?transport=udp"
        daemon = DaemonProcess(
            models_dir,
            tmp_path / "daemon.log",
            extra_args=(
                "--ice-servers", urls, "--ice-port-range", str(ports), "--token", TOKEN,
                "--engine", "mesh", "--max-sessions", "2", "--execution-provider", "cpu",
            ),
        )  # fmt: skip
        await asyncio.to_thread(daemon.start)
        try:
            servers = await fetch_ice_servers(daemon.url)
            assert [server["urls"] for server in servers] == [[urls.split(",")[0]], [urls.split(",")[1]]]
            password = servers[1]["credential"]
            frame = camera_frame(media_dir)
            configuration = relay_only(servers)
            async with PeerClient(
                daemon.url, frame, fps=10, keep_frames=1, token=TOKEN, rtc_configuration=configuration
            ) as call:
                # the client offered relayed candidates only: all it sends goes through coturn
                assert call.pc is not None
                offered = candidates(call.pc.localDescription.sdp)
                assert offered and {candidate["type"] for candidate in offered} == {"relay"}, offered
                # the daemon offered its host candidate in the port range, its STUN mapping and its own
                # relay, allocated with the credential it made from the secret
                answered = candidates(call.answer_sdp or "")
                by_type = {candidate["type"]: candidate for candidate in answered}
                assert set(by_type) == {"host", "srflx", "relay"}, answered
                assert ports.first <= int(by_type["host"]["port"]) <= ports.last
                assert by_type["srflx"]["port"] == by_type["host"]["port"], "STUN saw the ranged socket"

                await call.upload_source((media_dir / SOURCE).read_bytes())
                mark = len(call.received)
                await call.wait_for_frames(mark + 15, timeout=40)
                pair = nominated_pair(call.pc)
                assert pair.local_candidate.type == "relay", pair
                assert pair.local_candidate.host == "127.0.0.1"
                assert changed_pixels(call.frames[-1][1], frame) > 2000, "the face was not swapped"
                result = call.result(since=mark)
                assert result.unreadable == 0 and result.duplicates == 0

                assert call.session_id is not None
                async with WhepViewer(
                    daemon.url, call.session_id, audio=False, token=TOKEN, rtc_configuration=configuration
                ) as viewer:
                    await viewer.wait_for_frames(5, timeout=30)
                    assert viewer.pc is not None
                    assert nominated_pair(viewer.pc).local_candidate.type == "relay"
                    assert changed_pixels(viewer.frames[-1], frame) > 2000
                    links = [link for link in viewer.links if link.startswith("<turn:")]
                    assert len(links) == 1 and 'credential-type="password"' in links[0]
        finally:
            await asyncio.to_thread(daemon.close)
        log = daemon.log_path.read_text(errors="replace")
        assert coturn.secret not in log and password not in log, "the daemon logged a TURN secret"
