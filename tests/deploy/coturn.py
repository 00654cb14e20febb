"""Debian's coturn started for a test on 127.0.0.1 from the deployment's own files: the committed
template (deploy/kubernetes/base/turnserver.conf) rendered by the committed start script with a fresh
shared secret, exactly as the Kubernetes Deployment and compose.yaml run it; test-only settings go on
the command line, which overrides the file. Shared by the Allocate test and the relayed-call test."""

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.manifests import BASE_DIR

SCRIPT = BASE_DIR / "start-coturn.sh"
TEMPLATE = BASE_DIR / "turnserver.conf"
START_TIMEOUT_S = 20.0
# the template denies every loopback and private peer (an open relay into the cluster is an SSRF hole);
# a relayed call on one machine needs both lines to let 127.0.0.1 back in
LOOPBACK_PEERS = ("--allow-loopback-peers",)
LOOPBACK_ALLOWED_PEER_IP = "127.0.0.1"


@dataclass(frozen=True)
class Coturn:
    port: int
    secret: str
    realm: str
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def free_udp_and_tcp_port() -> int:
    for _ in range(20):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port: int = udp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
        return port
    raise AssertionError("no free port")


@contextmanager
def running_coturn(
    workdir: Path, *extra_args: str, allowed_peer_ip: str = "", verbose: bool = False
) -> Iterator[Coturn]:
    """coturn listening and relaying on 127.0.0.1 only; skipped (with the reason) when it is missing."""
    if shutil.which("turnserver") is None:
        pytest.skip("Debian coturn is not installed (apt-get install coturn; .ci/run installs it)")
    port = free_udp_and_tcp_port()
    coturn = Coturn(
        port, "test-shared-secret-" + os.urandom(8).hex(), "livefuse.test", workdir / "coturn.log"
    )
    env = dict(os.environ) | {
        "TURN_SECRET": coturn.secret,
        "TURN_REALM": coturn.realm,
        "TURN_ALLOWED_PEER_IP": allowed_peer_ip,
        "TURN_TEMPLATE": str(TEMPLATE),
        "TURN_CONF_DIR": str(workdir / "run"),
    }
    arguments = ["--listening-ip", "127.0.0.1", "--relay-ip", "127.0.0.1", "--listening-port", str(port)]
    arguments += ["--pidfile", str(workdir / "turnserver.pid"), "--userdb", str(workdir / "turndb")]
    arguments += ["--verbose"] if verbose else []
    with coturn.log.open("wb") as output:
        process = subprocess.Popen(
            ["/bin/sh", str(SCRIPT), *arguments, *extra_args], env=env, stdout=output, stderr=output
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None, coturn.log_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "coturn did not listen: " + coturn.log_text()
                time.sleep(0.1)
        yield coturn
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
