"""compose.yaml is not a Kubernetes object and no Docker engine is here: it is read as YAML and checked for
what it must do (GPU reservation, health check, drain time, ports, flags, environment, coturn files)."""

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.daemon_facts import (
    REPO_ROOT,
    argument_value,
    check_serve_arguments,
    environment_read_by_product,
    get_routes,
    public_get_paths,
)
from tests.deploy.dockerfile import exec_form, healthcheck_command, last, parse_dockerfile
from tests.deploy.kustomize import read_env_file
from tests.deploy.manifests import BASE_DIR, turnserver_options

COMPOSE = REPO_ROOT / "compose.yaml"
ENV_EXAMPLE = REPO_ROOT / "deploy" / "compose.env.example"
DAEMONS = {"livefuse": "cuda", "livefuse-cpu": "cpu"}
VARIABLE = re.compile(r"\$\{(\w+)(?::?[-?][^}]*)?\}")


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return document


def service(name: str) -> dict[str, Any]:
    services: dict[str, dict[str, Any]] = compose()["services"]
    return services[name]


def port_range(text: str) -> range:
    low, _, high = text.partition("-")
    return range(int(low), int(high or low) + 1)


def test_the_gpu_daemon_reserves_one_nvidia_gpu() -> None:
    devices = service("livefuse")["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert "deploy" not in service("livefuse-cpu"), "the CPU variant must start on hosts without a GPU"
    assert service("livefuse-cpu")["profiles"] == ["cpu"], "only started when asked for"


@pytest.mark.parametrize("name", sorted(DAEMONS))
def test_daemon_services_run_their_image_with_flags_it_has(name: str) -> None:
    daemon = service(name)
    dockerfile = REPO_ROOT / daemon["build"]["dockerfile"]
    instructions = parse_dockerfile(dockerfile)
    assert exec_form(last(instructions, "ENTRYPOINT").arguments) == ["python", "run_stream.py"]
    command = daemon["command"]
    assert command[0] == "serve"
    check_serve_arguments(command[1:], f"compose.yaml {name}")
    assert argument_value(command, "--execution-provider") == DAEMONS[name]
    assert argument_value(command, "--host") == "0.0.0.0"
    port = argument_value(command, "--port")
    assert f"{port}:{port}" in daemon["ports"]


@pytest.mark.parametrize("name", sorted(DAEMONS))
def test_daemon_health_check_and_shutdown(name: str) -> None:
    daemon = service(name)
    check = daemon["healthcheck"]
    assert check["test"][0] == "CMD"
    image_check = healthcheck_command(
        last(parse_dockerfile(REPO_ROOT / "Dockerfile"), "HEALTHCHECK").arguments
    )
    assert check["test"][1:] == image_check, "the same probe as the image's HEALTHCHECK"
    port = argument_value(daemon["command"], "--port")
    assert f"127.0.0.1:{port}/health" in check["test"][-1]
    assert "/health" in get_routes() and "/health" in public_get_paths()
    assert "start_period" in check
    assert daemon["stop_signal"] == "SIGTERM"
    grace = int(str(daemon["stop_grace_period"]).removesuffix("s"))
    drain = float(argument_value(daemon["command"], "--drain-timeout") or 10)
    assert grace > drain, "Compose would SIGKILL the daemon in the middle of its drain"


@pytest.mark.parametrize("name", sorted(DAEMONS))
def test_daemon_environment_and_models_volume(name: str) -> None:
    daemon = service(name)
    environment: dict[str, str] = daemon["environment"]
    for variable in environment:
        if variable.startswith("LIVEFUSE_"):
            assert variable in environment_read_by_product(), f"{variable}: nothing reads it"
    assert "LIVEFUSE_TOKEN" in environment and ":?" in environment["LIVEFUSE_TOKEN"], (
        "refuse to start without"
    )
    models = environment["LIVEFUSE_MODELS"]
    assert any(volume.endswith(f":{models}:ro") for volume in daemon["volumes"])
    assert daemon["read_only"] is True
    assert any(volume.endswith(f":{environment['XDG_CACHE_HOME']}") for volume in daemon["volumes"])


def test_ice_port_range_is_published_one_to_one_and_apart_from_the_relay_range() -> None:
    daemon = service("livefuse")
    ice = daemon["environment"]["LIVEFUSE_ICE_PORT_RANGE"]
    assert f"{ice}:{ice}/udp" in daemon["ports"], "host candidates advertise the container's own ports"
    options = turnserver_options((BASE_DIR / "turnserver.conf").read_text(encoding="utf-8"))
    relay = range(int(options["min-port"][0]), int(options["max-port"][0]) + 1)
    listening = int(options["listening-port"][0])
    ice_ports = set(port_range(ice))
    assert not ice_ports & set(relay), "coturn (host network) and the daemon would fight over ports"
    assert listening not in ice_ports
    assert (
        f"turn:${{PUBLIC_ADDRESS}}:{listening}?transport=udp" in daemon["environment"]["LIVEFUSE_ICE_SERVERS"]
    )


def test_coturn_uses_the_committed_template_and_start_script() -> None:
    coturn = service("coturn")
    assert coturn["network_mode"] == "host"
    mounts = {}
    for volume in coturn["volumes"]:
        source, target, mode = volume.split(":")
        assert mode == "ro"
        assert (REPO_ROOT / source).is_file(), f"{source} does not exist"
        mounts[target] = Path(source).name
    assert mounts[coturn["entrypoint"][-1]] == "start-coturn.sh"
    script = (BASE_DIR / "start-coturn.sh").read_text(encoding="utf-8")
    template = re.search(r"TURN_TEMPLATE:-([^}]+)\}", script)
    assert template and mounts[template.group(1)] == "turnserver.conf"
    required = set(re.findall(r"\$\{(TURN_[A-Z_]+):\?", script))
    assert required and required <= set(coturn["environment"])
    assert coturn["image"] == "coturn/coturn:4.6.3"


def test_env_example_names_every_variable_compose_reads() -> None:
    used = set(VARIABLE.findall(COMPOSE.read_text(encoding="utf-8")))
    assert {"LIVEFUSE_TOKEN", "TURN_SECRET", "PUBLIC_ADDRESS"} <= used
    assert used <= set(read_env_file(ENV_EXAMPLE)), sorted(used - set(read_env_file(ENV_EXAMPLE)))
