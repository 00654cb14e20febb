"""Janus and the room workers as the manifests make them (docs/deploy.md "Video-conference rooms"): room
jobs reach ready workers only (free capacity), each job's Location names its pod, the workers are daemon
pods with flags of `serve`, Janus runs on the host network with its secret from the Secret, and the
committed Janus configuration is one a real Janus starts with (VideoRoom and HTTP API up)."""

import json
import re
import shutil
import urllib.request
from pathlib import Path

import pytest

from tests.deploy.daemon_facts import argument_value, check_serve_arguments, get_routes
from tests.deploy.kustomize import Resource, pod_spec
from tests.deploy.manifests import BASE_DIR, container, find, one, secret_keys

ROOMS = "livefuse-rooms"
JANUS = "livefuse-janus"


def test_room_jobs_go_to_ready_workers_and_their_location_names_the_pod(resources: list[Resource]) -> None:
    assert {"/api/rooms", "/api/rooms/{job_id}"} <= get_routes()
    workers = one(resources, "StatefulSet", ROOMS)
    new_jobs = one(resources, "Service", ROOMS)
    assert not new_jobs["spec"].get("publishNotReadyAddresses", False), "new room jobs: ready pods only"
    headless = one(resources, "Service", workers["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    item = container(workers, "livefuse")
    assert item["readinessProbe"]["httpGet"]["path"] == "/ready"  # 503 at --max-sessions
    env = {variable["name"]: variable.get("value") for variable in item["env"]}
    url = env["LIVEFUSE_PUBLIC_URL"]
    match = re.fullmatch(r"http://\$\(POD_NAME\)\.([\w-]+)\.\$\(POD_NAMESPACE\)\.svc:(\d+)", url)
    assert match and match.group(1) == headless["metadata"]["name"], url
    ports = {port["containerPort"] for port in item["ports"]}
    assert int(match.group(2)) in ports


def test_room_workers_are_daemon_pods_on_a_gpu(resources: list[Resource]) -> None:
    item = container(one(resources, "StatefulSet", ROOMS), "livefuse")
    args = item["args"]
    assert args[0] == "serve"
    check_serve_arguments(args[1:], "rooms-statefulset.yaml")
    assert argument_value(args, "--execution-provider") == "cuda"
    assert item["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert not find(resources, "Ingress") or all(
        path["backend"]["service"]["name"] not in (ROOMS, f"{ROOMS}-headless")
        for ingress in find(resources, "Ingress")
        for rule in ingress["spec"]["rules"]
        for path in rule["http"]["paths"]
    ), "no browser reaches a room worker"


def test_janus_runs_on_the_host_network_with_its_secret_and_config(resources: list[Resource]) -> None:
    janus = one(resources, "Deployment", JANUS)
    spec = pod_spec(janus)
    assert spec is not None and spec["hostNetwork"] is True
    assert janus["spec"]["strategy"]["type"] == "Recreate"
    item = container(janus, "janus")
    script = " ".join(item["args"])
    assert '--apisecret="$JANUS_API_SECRET"' in script  # from the environment, not the pod spec
    refs = [v["valueFrom"]["secretKeyRef"] for v in item["env"] if "secretKeyRef" in v.get("valueFrom", {})]
    assert refs and all(ref["key"] in secret_keys(resources, ref["name"]) for ref in refs)
    assert item["livenessProbe"]["httpGet"]["path"] == "/janus/info"
    config = one(resources, "ConfigMap", JANUS)["data"]
    assert "port = 8088" in config["janus.transport.http.jcfg"]
    assert {port["containerPort"] for port in item["ports"]} == {8088}


@pytest.mark.skipif(shutil.which("janus") is None, reason="Janus is not installed (apt-get install janus)")
def test_the_committed_janus_config_starts_a_real_janus(tmp_path: Path) -> None:
    from bench.clients.janus_server import JanusServer, janus_missing_reason
    from bench.clients.network_namespace import entered, namespace, unavailable_reason

    reason = unavailable_reason() or janus_missing_reason()
    if reason:
        pytest.skip(reason)
    folder = tmp_path / "janus-config"
    shutil.copytree(BASE_DIR / "janus", folder)
    config = folder / "janus.jcfg"
    config.write_text(config.read_text().replace("/etc/janus-config", str(folder)))
    with namespace() as name, entered(name):
        server = JanusServer.committed(folder, 8088)
        with server, urllib.request.urlopen(f"{server.url}/info", timeout=5) as response:
            info = json.loads(response.read())
    assert "janus.plugin.videoroom" in info["plugins"]
    assert set(info["plugins"]) == {"janus.plugin.videoroom"}
    assert "janus.transport.http" in info["transports"]
