"""The daemon's pod as the manifests make it: resources, GPU, probes on routes the daemon serves, drain
within the grace period, non-root, flags of `serve`, environment the daemon reads, models volume."""

import re
from typing import Any

from tests.deploy.daemon_facts import (
    NETWORK_ENVIRONMENT,
    NETWORK_SERVE_FLAGS,
    argument_value,
    check_serve_arguments,
    environment_read_by_product,
    get_routes,
    public_get_paths,
    serve_flags,
)
from tests.deploy.kustomize import Resource, iter_containers, pod_spec
from tests.deploy.manifests import (
    DAEMON,
    config_value,
    container,
    daemon_args,
    find,
    one,
    secret_keys,
)

PRESTOP_TO_SIGTERM_MARGIN_S = 5  # shutdown after the drain: worker join, runner cleanup


def test_every_container_has_requests_limits_and_probes(resources: list[Resource]) -> None:
    for item in iter_containers(resources):
        requests = item["resources"]["requests"]
        limits = item["resources"]["limits"]
        assert {"cpu", "memory"} <= set(requests), item["name"]
        assert "memory" in limits, item["name"]
        assert "livenessProbe" in item and "readinessProbe" in item, item["name"]


def test_the_daemon_gets_one_whole_gpu(resources: list[Resource]) -> None:
    limits = container(one(resources, "StatefulSet", DAEMON), DAEMON)["resources"]
    assert limits["limits"]["nvidia.com/gpu"] == 1 == limits["requests"]["nvidia.com/gpu"]
    assert argument_value(daemon_args(resources), "--execution-provider") == "cuda"


def http_probes(item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    probes: dict[str, dict[str, Any]] = {}
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        if kind in item and "httpGet" in item[kind]:
            probes[kind] = item[kind]["httpGet"]
    return probes


def test_probes_ask_routes_the_daemon_serves_on_its_port(resources: list[Resource]) -> None:
    item = container(one(resources, "StatefulSet", DAEMON), DAEMON)
    probes = http_probes(item)
    assert set(probes) == {"startupProbe", "livenessProbe", "readinessProbe"}
    ports = {port["name"]: port["containerPort"] for port in item["ports"]}
    for kind, probe in probes.items():
        assert probe["path"] in get_routes(), f"{kind}: the daemon has no GET {probe['path']}"
        assert ports[probe["port"]] == int(argument_value(daemon_args(resources), "--port") or 0)
    assert probes["livenessProbe"]["path"] == "/health"
    assert probes["readinessProbe"]["path"] == "/ready" == probes["startupProbe"]["path"]
    assert "/health" in public_get_paths(), "liveness must work without the bearer token"
    assert "/ready" in public_get_paths(), "readiness and startup must work without the bearer token"


def test_termination_grace_covers_prestop_and_the_daemons_drain(resources: list[Resource]) -> None:
    statefulset = one(resources, "StatefulSet", DAEMON)
    spec = pod_spec(statefulset)
    assert spec is not None
    item = container(statefulset, DAEMON)
    pre_stop = item["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] in ("/bin/sleep", "sleep")
    sleep_s = float(pre_stop[1])
    drain_s = float(argument_value(daemon_args(resources), "--drain-timeout") or 10)
    assert (
        0 < sleep_s
        and spec["terminationGracePeriodSeconds"] >= sleep_s + drain_s + PRESTOP_TO_SIGTERM_MARGIN_S
    )


def test_pods_run_as_non_root_with_a_read_only_root(resources: list[Resource]) -> None:
    for workload in find(resources, "StatefulSet") + find(resources, "Deployment"):
        spec = pod_spec(workload)
        assert spec is not None
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        for item in spec["containers"]:
            context = item["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"]["drop"] == ["ALL"]


def test_daemon_arguments_are_flags_of_serve(resources: list[Resource]) -> None:
    args = daemon_args(resources)
    assert args[0] == "serve"
    check_serve_arguments(args[1:], "statefulset.yaml")
    assert argument_value(args, "--host") == "0.0.0.0"


def test_the_network_flags_and_variables_the_files_set_are_the_daemons() -> None:
    """--ice-servers, --turn-secret, --public-url ... (issue 11 items 2 and 4) exist, with their variables."""
    assert NETWORK_SERVE_FLAGS <= serve_flags()
    assert NETWORK_ENVIRONMENT <= environment_read_by_product()


def test_environment_is_what_the_daemon_reads_and_every_reference_resolves(resources: list[Resource]) -> None:
    configs = {resource["metadata"]["name"] for resource in find(resources, "ConfigMap")}
    for item in iter_containers(resources):
        defined: set[str] = set()
        for variable in item.get("env", []):
            name = variable["name"]
            if name.startswith("LIVEFUSE_"):
                assert name in environment_read_by_product(), f"{name}: nothing reads it"
            for reference in re.findall(r"\$\((\w+)\)", variable.get("value", "")):
                assert reference in defined, f"{name}: $({reference}) must be defined above it to expand"
            source = variable.get("valueFrom", {})
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                assert ref["key"] in secret_keys(resources, ref["name"]), ref
            if "configMapKeyRef" in source:
                ref = source["configMapKeyRef"]
                assert ref["name"] in configs
                config_value(resources, ref["name"], ref["key"])
            defined.add(name)


def test_models_volume_is_mounted_read_only_where_the_daemon_looks(resources: list[Resource]) -> None:
    statefulset = one(resources, "StatefulSet", DAEMON)
    item = container(statefulset, DAEMON)
    env = {variable["name"]: variable.get("value") for variable in item["env"]}
    mounts = {mount["name"]: mount for mount in item["volumeMounts"]}
    assert mounts["models"]["mountPath"] == env["LIVEFUSE_MODELS"] and mounts["models"]["readOnly"] is True
    assert mounts["cache"]["mountPath"] == env["XDG_CACHE_HOME"], "batch-dynamic copies need a writable cache"
    spec = pod_spec(statefulset)
    assert spec is not None
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    for workload in find(resources, "StatefulSet") + find(resources, "Deployment"):
        workload_spec = pod_spec(workload)
        assert workload_spec is not None
        names = {volume["name"] for volume in workload_spec.get("volumes", [])}
        for each in workload_spec["containers"]:
            for mount in each.get("volumeMounts", []):
                assert mount["name"] in names
        for volume in workload_spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                one(resources, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
            if "configMap" in volume:
                one(resources, "ConfigMap", volume["configMap"]["name"])
    assert "persistentVolumeClaim" in volumes["models"] or "hostPath" in volumes["models"]
