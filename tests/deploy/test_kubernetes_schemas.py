"""Kubernetes manifests are schema-valid for a pinned Kubernetes version, and the kustomizations are complete.

Built-in kinds are validated by kubernetes-validate in strict mode (unknown fields are errors), both as
committed and as each overlay renders them (tests/deploy/kustomize.py; no kustomize binary here). The
one CRD, the Prometheus Operator's ServiceMonitor, has no schema there: it is checked against
SERVICE_MONITOR_SCHEMA below, a strict subset of the operator's CRD written for the fields we use.
"""

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.deploy.kustomize import Resource, iter_containers, load_yaml_documents, pod_spec
from tests.deploy.manifests import (
    ADAPTER_VALUES,
    BASE_DIR,
    DAEMON,
    KUBERNETES_DIR,
    KUBERNETES_VERSION,
    OVERLAYS,
    all_yaml_files,
    find,
    one,
    rendered,
    secret_value,
)

CRD_GROUPS = ("monitoring.coreos.com/",)
NOT_KUBERNETES_OBJECTS = ("kustomize.config.k8s.io/",)

_OBJECT_META = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
_SECRET_KEY = {
    "type": "object",
    "required": ["name", "key"],
    "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "key": {"type": "string"}, "optional": {"type": "boolean"}},
}
_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _OBJECT_META,
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "authorization": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {"type": {"type": "string"}, "credentials": _SECRET_KEY},
                            },
                        },
                    },
                },
            },
        },
    },
}


def validate(document: Resource) -> None:
    api_version = document["apiVersion"]
    if api_version.startswith(CRD_GROUPS):
        assert document["kind"] == "ServiceMonitor", f"no schema here for {api_version} {document['kind']}"
        jsonschema.validate(document, SERVICE_MONITOR_SCHEMA)
    else:
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def kubernetes_objects(path: Path) -> list[Resource]:
    return [
        document
        for document in load_yaml_documents(path)
        if "kind" in document and not document.get("apiVersion", "").startswith(NOT_KUBERNETES_OBJECTS)
    ]


def test_every_yaml_file_under_deploy_is_known_and_parses() -> None:
    files = all_yaml_files()
    assert files
    for path in files:
        documents = load_yaml_documents(path)
        assert documents, f"{path} is empty"
        if path == ADAPTER_VALUES:
            continue  # Helm values for the Prometheus adapter, checked below
        for document in documents:
            assert "apiVersion" in document and "kind" in document, (
                f"{path}: not a Kubernetes/kustomize document"
            )


@pytest.mark.parametrize(
    "path", all_yaml_files(), ids=lambda path: str(path.relative_to(KUBERNETES_DIR.parent))
)
def test_every_manifest_validates_against_the_pinned_kubernetes_version(path: Path) -> None:
    for document in kubernetes_objects(path):
        validate(document)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_resource_validates(overlay: str) -> None:
    resources = rendered(overlay).resources
    assert resources
    for resource in resources:
        validate(resource)


def test_strict_validation_rejects_a_misspelt_field() -> None:
    statefulset = copy.deepcopy(
        one(load_yaml_documents(BASE_DIR / "statefulset.yaml"), "StatefulSet", DAEMON)
    )
    statefulset["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {
        "httpGet": {"path": "/health"}
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, KUBERNETES_VERSION, strict=True)


def test_service_monitor_schema_rejects_a_misspelt_field() -> None:
    monitor = copy.deepcopy(
        one(load_yaml_documents(BASE_DIR / "servicemonitor.yaml"), "ServiceMonitor", DAEMON)
    )
    jsonschema.validate(monitor, SERVICE_MONITOR_SCHEMA)
    monitor["spec"]["endpoints"][0]["bearerTokenSecrett"] = {"name": "x", "key": "y"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, SERVICE_MONITOR_SCHEMA)


@pytest.mark.parametrize("directory", [BASE_DIR] + [KUBERNETES_DIR / "overlays" / name for name in OVERLAYS])
def test_kustomizations_list_every_file_in_their_folder(directory: Path) -> None:
    overlay = directory.name if directory != BASE_DIR else OVERLAYS[0]
    read = rendered(overlay).files_read
    for path in directory.iterdir():
        if path.name in (".gitignore", "secrets.env") or not path.is_file():
            continue
        if path.name.endswith(".example") and (path.with_suffix("") in read or path.resolve() in read):
            continue
        assert path.resolve() in read, f"{path} is not used by {directory / 'kustomization.yaml'}"


def test_overlays_render_what_they_promise() -> None:
    production = rendered("production").resources
    single = rendered("single-node").resources
    assert find(production, "PersistentVolumeClaim", "livefuse-models")
    assert not find(single, "PersistentVolumeClaim")
    volumes = {volume["name"]: volume for volume in pod_spec(one(single, "StatefulSet", DAEMON))["volumes"]}  # type: ignore[index]
    assert volumes["models"]["hostPath"]["path"] == "/srv/livefuse/models"
    for resources in (production, single):
        namespaces = {
            resource["metadata"].get("namespace") for resource in resources if resource["kind"] != "Namespace"
        }
        assert namespaces == {one(resources, "Namespace", "livefuse")["metadata"]["name"]}
        for item in iter_containers(resources):
            assert re.search(r":[\w.-]+$|@sha256:", item["image"]), f"{item['image']}: pin a tag or digest"


def test_the_example_token_is_one_the_daemon_refuses() -> None:
    # a copied, unedited secrets.env must stop the daemon at start, not run it with a published token
    for overlay in OVERLAYS:
        assert len(secret_value(rendered(overlay).resources, "livefuse-secrets", "token")) < 8
