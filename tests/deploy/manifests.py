"""The deployment files as the tests see them: the rendered overlays and lookups over their resources."""

import base64
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.daemon_facts import REPO_ROOT
from tests.deploy.kustomize import Rendered, Resource, pod_spec, render

KUBERNETES_VERSION = "1.31.0"  # the version every manifest is validated against (docs/deploy.md)
KUBERNETES_DIR = REPO_ROOT / "deploy" / "kubernetes"
BASE_DIR = KUBERNETES_DIR / "base"
OVERLAYS = ("production", "single-node")
ADAPTER_VALUES = KUBERNETES_DIR / "prometheus-adapter" / "values.yaml"
DAEMON = "livefuse"  # the StatefulSet and its container
COTURN = "livefuse-turn"
STATEFULSET_POD_NAME = "statefulset.kubernetes.io/pod-name"


@cache
def rendered(overlay: str) -> Rendered:
    return render(KUBERNETES_DIR / "overlays" / overlay)


def find(resources: list[Resource], kind: str, name: str | None = None) -> list[Resource]:
    return [
        resource
        for resource in resources
        if resource["kind"] == kind and (name is None or resource["metadata"]["name"] == name)
    ]


def one(resources: list[Resource], kind: str, name: str) -> Resource:
    found = find(resources, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def container(workload: Resource, name: str) -> dict[str, Any]:
    spec = pod_spec(workload)
    assert spec is not None
    for item in spec["containers"]:
        if item["name"] == name:
            return item  # type: ignore[no-any-return]
    raise AssertionError(f"{workload['metadata']['name']} has no container {name}")


def pod_label_sets(workload: Resource, max_replicas: int) -> list[dict[str, str]]:
    """The labels the workload's pods will carry; StatefulSet pods also get their own name as a label."""
    labels: dict[str, str] = dict(workload["spec"]["template"]["metadata"]["labels"])
    if workload["kind"] != "StatefulSet":
        return [labels]
    name = workload["metadata"]["name"]
    return [labels | {STATEFULSET_POD_NAME: f"{name}-{index}"} for index in range(max_replicas)]


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def config_value(resources: list[Resource], name: str, key: str) -> str:
    data = one(resources, "ConfigMap", name).get("data", {})
    assert key in data, f"ConfigMap {name} has no key {key}"
    return str(data[key])


def secret_keys(resources: list[Resource], name: str) -> set[str]:
    secret = one(resources, "Secret", name)
    return set(secret.get("data", {})) | set(secret.get("stringData", {}))


def secret_value(resources: list[Resource], name: str, key: str) -> str:
    return base64.b64decode(one(resources, "Secret", name)["data"][key]).decode()


def adapter_rules() -> list[dict[str, Any]]:
    values = yaml.safe_load(ADAPTER_VALUES.read_text(encoding="utf-8"))
    rules: list[dict[str, Any]] = values["rules"]["custom"]
    return rules


def turnserver_options(text: str) -> dict[str, list[str]]:
    """coturn config lines: option -> values (flags without `=` get "")."""
    options: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        options.setdefault(key.strip(), []).append(value.strip())
    return options


def all_yaml_files() -> list[Path]:
    return sorted(path for path in (REPO_ROOT / "deploy").rglob("*") if path.suffix in (".yaml", ".yml"))


def daemon_args(resources: list[Resource]) -> list[str]:
    args: list[str] = container(one(resources, "StatefulSet", DAEMON), DAEMON)["args"]
    return args


def max_replicas(resources: list[Resource]) -> int:
    return int(one(resources, "HorizontalPodAutoscaler", DAEMON)["spec"]["maxReplicas"])


def workloads(resources: list[Resource]) -> list[Resource]:
    return find(resources, "StatefulSet") + find(resources, "Deployment")
