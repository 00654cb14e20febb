"""The manifests' promises, checked against a running daemon on 127.0.0.1: the pod's own arguments and
environment (the GPU provider swapped for the CPU one, the host for loopback, a free port), its probes
without a token, the autoscaler's metric in /metrics, the image's HEALTHCHECK script, and a SIGTERM
drain that ends inside the pod's termination grace period.
"""

import asyncio
import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.clients.peer_client import PeerClient
from tests.deploy.daemon_facts import REPO_ROOT, argument_value
from tests.deploy.dockerfile import healthcheck_command, last, parse_dockerfile
from tests.deploy.manifests import DAEMON, container, one, rendered
from tests.integration.daemon_harness import camera_frame

OVERLAY = "production"
START_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.1


@dataclass
class RunningDaemon:
    process: subprocess.Popen[bytes]
    port: int
    token: str
    log: Path

    def get(self, path: str, token: str | None = None) -> tuple[int, str]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def local_arguments(arguments: list[str], port: int) -> list[str]:
    """The pod's arguments with loopback, a free port and the CPU provider (no GPU in the test)."""
    replaced = {"--host": "127.0.0.1", "--port": str(port), "--execution-provider": "cpu"}
    local = list(arguments)
    for index, argument in enumerate(local[:-1]):
        if argument in replaced:
            local[index + 1] = replaced[argument]
    return local


def statefulset_container() -> dict[str, Any]:
    return container(one(rendered(OVERLAY).resources, "StatefulSet", DAEMON), DAEMON)


class Condition:
    def __init__(self, daemon: RunningDaemon, path: str, token: str | None, status: int) -> None:
        self.daemon, self.path, self.token, self.status = daemon, path, token, status

    def __call__(self) -> bool:
        try:
            return self.daemon.get(self.path, self.token)[0] == self.status
        except OSError:
            return False  # not listening yet


def wait_until(condition: Condition, what: str, timeout_s: float, daemon: RunningDaemon) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if daemon.process.poll() is not None:
            pytest.fail(
                f"the daemon exited ({daemon.process.returncode}) waiting for {what}: {daemon.log.read_text()}"
            )
        if condition():
            return
        time.sleep(POLL_INTERVAL_S)
    pytest.fail(f"{what} did not happen within {timeout_s} s")


@contextlib.contextmanager
def pod_daemon(models_dir: Path, workdir: Path) -> Iterator[RunningDaemon]:
    """A daemon started with the pod's arguments and environment (made local), killed if still running."""
    item = statefulset_container()
    port = free_port()
    arguments = local_arguments(list(item["args"]), port)
    token = secrets.token_urlsafe(16)
    environment = dict(os.environ)
    for variable in item["env"]:
        if "value" in variable and "$(" not in variable["value"]:
            environment[variable["name"]] = variable["value"]
    cache = workdir / "cache"
    cache.mkdir()
    environment |= {"LIVEFUSE_MODELS": str(models_dir), "XDG_CACHE_HOME": str(cache), "LIVEFUSE_TOKEN": token}
    log = workdir / "daemon.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "run_stream.py", *arguments],
            cwd=REPO_ROOT,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    running = RunningDaemon(process, port, token, log)
    try:
        wait_until(Condition(running, "/health", None, 200), "/health", START_TIMEOUT_S, running)
        yield running
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def daemon(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    """Shared by the read-only checks; the SIGTERM test starts its own (it ends the process)."""
    with pod_daemon(models_dir, tmp_path_factory.mktemp("daemon")) as running:
        yield running


def test_liveness_path_answers_without_the_token(daemon: RunningDaemon) -> None:
    path = statefulset_container()["livenessProbe"]["httpGet"]["path"]
    assert daemon.get(path) == (200, '{"status": "ok"}')


def test_startup_and_readiness_turn_200_once_the_models_are_in(daemon: RunningDaemon) -> None:
    item = statefulset_container()
    startup = item["startupProbe"]
    budget_s = startup["periodSeconds"] * startup["failureThreshold"]
    for probe in ("startupProbe", "readinessProbe"):
        path = item[probe]["httpGet"]["path"]
        wait_until(Condition(daemon, path, daemon.token, 200), f"{probe} {path}", min(budget_s, 60), daemon)


def test_readiness_answers_without_the_token(daemon: RunningDaemon) -> None:
    path = statefulset_container()["readinessProbe"]["httpGet"]["path"]
    wait_until(Condition(daemon, path, daemon.token, 200), "ready", 60, daemon)
    assert daemon.get(path)[0] == 200


def test_metrics_carry_the_autoscalers_gauge_for_the_scrape_token(daemon: RunningDaemon) -> None:
    resources = rendered(OVERLAY).resources
    metric = one(resources, "HorizontalPodAutoscaler", DAEMON)["spec"]["metrics"][0]["pods"]["metric"]["name"]
    status, text = daemon.get("/metrics", daemon.token)
    assert status == 200
    assert f"# TYPE {metric} gauge" in text
    assert f"\n{metric} 0" in text, "no calls open: the gauge reads 0"


def test_image_healthcheck_script_passes_against_the_daemon(daemon: RunningDaemon) -> None:
    script = healthcheck_command(last(parse_dockerfile(REPO_ROOT / "Dockerfile"), "HEALTHCHECK").arguments)[2]
    probe = script.replace("127.0.0.1:8080", f"127.0.0.1:{daemon.port}")
    assert probe != script
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr


async def test_sigterm_drains_an_open_call_within_the_pods_grace_period(
    models_dir: Path, media_dir: Path, tmp_path: Path
) -> None:
    """Its own daemon (the shared one keeps serving the other checks, in any order), with one call
    open and swapping when SIGTERM arrives: the drain closes that call and the process exits 0 in time."""
    statefulset = one(rendered(OVERLAY).resources, "StatefulSet", DAEMON)
    grace_s = statefulset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    pre_stop_s = float(statefulset_container()["lifecycle"]["preStop"]["exec"]["command"][1])
    assert argument_value(list(statefulset_container()["args"]), "--drain-timeout") is not None
    frame = camera_frame(media_dir)
    with pod_daemon(models_dir, tmp_path) as daemon:
        wait_until(Condition(daemon, "/ready", None, 200), "ready", 60, daemon)
        url = f"http://127.0.0.1:{daemon.port}"
        async with PeerClient(url, frame, token=daemon.token) as call:
            await call.wait_for_frames(5, timeout=60)
            session_id = call.session_id
            started = time.monotonic()
            daemon.process.send_signal(signal.SIGTERM)
            returncode = await asyncio.to_thread(daemon.process.wait, grace_s - pre_stop_s)
            elapsed_s = time.monotonic() - started
        log = daemon.log.read_text()
    assert returncode == 0, log
    assert elapsed_s < grace_s - pre_stop_s
    assert re.search(r'"msg": "draining 1 sessions', log), log[-3000:]
    assert '"event": "drain_timeout"' not in log, "the open call was not closed within --drain-timeout"
    assert re.search(rf'"msg": "session {session_id}: closed"', log), "the drain did not close the call"
