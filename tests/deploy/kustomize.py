"""A small, strict kustomize renderer for the tests: no kustomize or kubectl binary exists here.

It implements exactly the features deploy/kubernetes uses and refuses every other kustomization key,
so a manifest change that needs more of kustomize fails here loudly instead of being checked wrongly:
`resources` (files and folders with their own kustomization.yaml), `configMapGenerator` (files),
`secretGenerator` (envs; a missing `secrets.env` is read from its committed `.example`, as a user
would copy it), `generatorOptions.disableNameSuffixHash: true`, `namespace`, `images`, and `patches`
with a target that are either JSON 6902 operation lists (add, replace, remove, test) or a whole-resource
`$patch: delete`.
"""

import base64
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

SUPPORTED_KEYS = frozenset(
    {
        "apiVersion",
        "kind",
        "resources",
        "configMapGenerator",
        "secretGenerator",
        "generatorOptions",
        "namespace",
        "images",
        "patches",
    }
)
KUSTOMIZATION = "kustomization.yaml"
EXAMPLE_SUFFIX = ".example"


class RenderError(AssertionError):
    """The kustomization uses something this renderer does not implement, or is wrong."""


@dataclass(frozen=True)
class Rendered:
    """What `kustomize build DIR` would print, plus the files the build read."""

    resources: list[Resource]
    files_read: frozenset[Path]


def load_yaml_documents(path: Path) -> list[Resource]:
    """Every non-empty YAML document of a file."""
    with path.open(encoding="utf-8") as stream:
        return [document for document in yaml.safe_load_all(stream) if document is not None]


def render(directory: Path) -> Rendered:
    """Build the kustomization in `directory` (recursively through its folder resources)."""
    kustomization_path = directory / KUSTOMIZATION
    kustomization = yaml.safe_load(kustomization_path.read_text(encoding="utf-8"))
    unknown = set(kustomization) - SUPPORTED_KEYS
    if unknown:
        raise RenderError(f"{kustomization_path}: keys this test renderer does not implement: {unknown}")
    if kustomization.get("kind") != "Kustomization":
        raise RenderError(f"{kustomization_path}: kind must be Kustomization")
    files_read: set[Path] = {kustomization_path.resolve()}
    resources: list[Resource] = []
    for entry in kustomization.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            nested = render(target)
            resources.extend(nested.resources)
            files_read |= nested.files_read
        else:
            resources.extend(load_yaml_documents(target))
            files_read.add(target)
    options = kustomization.get("generatorOptions", {})
    if options and options != {"disableNameSuffixHash": True}:
        raise RenderError(
            f"{kustomization_path}: only generatorOptions.disableNameSuffixHash: true is implemented"
        )
    if (kustomization.get("configMapGenerator") or kustomization.get("secretGenerator")) and not options:
        raise RenderError(
            f"{kustomization_path}: generated names carry a hash suffix; references are not rewritten"
        )
    for generator in kustomization.get("configMapGenerator", []):
        resource, read = _config_map(directory, generator)
        resources.append(resource)
        files_read |= read
    for generator in kustomization.get("secretGenerator", []):
        resource, read = _secret(directory, generator)
        resources.append(resource)
        files_read |= read
    for patch in kustomization.get("patches", []):
        resources = _apply_patch(resources, patch, kustomization_path)
    if "namespace" in kustomization:
        for resource in resources:
            if resource["kind"] != "Namespace":
                resource.setdefault("metadata", {})["namespace"] = kustomization["namespace"]
    for image in kustomization.get("images", []):
        _set_image(resources, image)
    return Rendered(resources, frozenset(files_read))


def _config_map(directory: Path, generator: dict[str, Any]) -> tuple[Resource, set[Path]]:
    if set(generator) != {"name", "files"}:
        raise RenderError(f"configMapGenerator {generator.get('name')}: only name + files are implemented")
    data: dict[str, str] = {}
    read: set[Path] = set()
    for name in generator["files"]:
        path = (directory / name).resolve()
        data[Path(name).name] = path.read_text(encoding="utf-8")
        read.add(path)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": generator["name"]},
        "data": data,
    }, read


def _secret(directory: Path, generator: dict[str, Any]) -> tuple[Resource, set[Path]]:
    if set(generator) != {"name", "envs"}:
        raise RenderError(f"secretGenerator {generator.get('name')}: only name + envs are implemented")
    data: dict[str, str] = {}
    read: set[Path] = set()
    for name in generator["envs"]:
        path = directory / name
        if not path.exists():
            path = directory / (name + EXAMPLE_SUFFIX)
        for key, value in read_env_file(path).items():
            data[key] = base64.b64encode(value.encode()).decode()
        read.add(path.resolve())
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": generator["name"]}}
    return secret | {"data": data}, read


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as kustomize reads them (comments and blank lines skipped)."""
    pairs: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, separator, value = line.partition("=")
        if not separator:
            raise RenderError(f"{path}: not KEY=VALUE: {line!r}")
        pairs[key.strip()] = value
    return pairs


def _matches(resource: Resource, target: dict[str, Any]) -> bool:
    if set(target) - {"kind", "name"}:
        raise RenderError(f"patch target: only kind and name are implemented, got {target}")
    return resource["kind"] == target.get("kind", resource["kind"]) and resource["metadata"][
        "name"
    ] == target.get("name", resource["metadata"]["name"])


def _apply_patch(resources: list[Resource], patch: dict[str, Any], origin: Path) -> list[Resource]:
    if set(patch) != {"target", "patch"}:
        raise RenderError(f"{origin}: patches need exactly target + an inline patch")
    body = yaml.safe_load(patch["patch"])
    matched = [resource for resource in resources if _matches(resource, patch["target"])]
    if not matched:
        raise RenderError(f"{origin}: patch target {patch['target']} matches no resource")
    if isinstance(body, dict):
        if body.get("$patch") != "delete":
            raise RenderError(
                f"{origin}: strategic merge patches other than $patch: delete are not implemented"
            )
        return [resource for resource in resources if not any(resource is gone for gone in matched)]
    for resource in matched:
        for operation in body:
            _json6902(resource, operation, origin)
    return resources


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise RenderError(f"JSON pointer must start with /: {path}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _json6902(document: Resource, operation: dict[str, Any], origin: Path) -> None:
    parts = _pointer(operation["path"])
    parent: Any = document
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    last = parts[-1]
    op = operation["op"]
    if op == "test":
        actual = parent[int(last)] if isinstance(parent, list) else parent[last]
        if actual != operation["value"]:
            raise RenderError(
                f"{origin}: test {operation['path']} == {operation['value']!r} failed: {actual!r}"
            )
    elif op in ("add", "replace"):
        value = copy.deepcopy(operation["value"])
        if isinstance(parent, list):
            if op == "add":
                parent.insert(len(parent) if last == "-" else int(last), value)
            else:
                parent[int(last)] = value
        else:
            if op == "replace" and last not in parent:
                raise RenderError(f"{origin}: replace of missing {operation['path']}")
            parent[last] = value
    elif op == "remove":
        del parent[int(last) if isinstance(parent, list) else last]
    else:
        raise RenderError(f"{origin}: JSON patch op {op} is not implemented")


def _set_image(resources: list[Resource], image: dict[str, Any]) -> None:
    if set(image) - {"name", "newName", "newTag"}:
        raise RenderError(f"images: only name, newName and newTag are implemented, got {image}")
    used = False
    for container in iter_containers(resources):
        name, _, tag = container["image"].partition(":")
        if name == image["name"]:
            new_tag = image.get("newTag", tag)
            container["image"] = image.get("newName", name) + (f":{new_tag}" if new_tag else "")
            used = True
    if not used:
        raise RenderError(f"images: {image['name']} is used by no container")


def pod_spec(resource: Resource) -> dict[str, Any] | None:
    """The pod template's spec of a workload (None for other kinds)."""
    if resource["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        spec: dict[str, Any] = resource["spec"]["template"]["spec"]
        return spec
    return None


def iter_containers(resources: list[Resource]) -> list[dict[str, Any]]:
    """Every container and init container of every workload."""
    containers: list[dict[str, Any]] = []
    for resource in resources:
        spec = pod_spec(resource)
        if spec is not None:
            containers.extend(spec.get("initContainers", []))
            containers.extend(spec["containers"])
    return containers
