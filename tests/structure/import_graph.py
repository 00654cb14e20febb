"""The project's import graph read from the source (an AST walk: every import, also those inside functions),
for the structure tests: circles and arrows that point the wrong way between layers."""

import ast
import gc
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.conftest import REPO_ROOT

PRODUCT_PACKAGES = ("gpu_ops", "models", "streamer", "web")
PACKAGES = (*PRODUCT_PACKAGES, "bench")  # the benchmarks: the top floor, above the product
Graph = Mapping[str, frozenset[str]]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path = REPO_ROOT) -> dict[str, Path]:
    """Every module of the product packages, the benchmarks and run_stream, by dotted name."""
    modules = {"run_stream": root / "run_stream.py"}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            modules[module_name(path, root)] = path
    return modules


def parse_module(path: Path) -> ast.Module:
    """The module's AST, parsed with the garbage collector paused.

    CPython 3.11.7 (the CI's) raises "AST constructor recursion depth mismatch" when a collection inside
    the parse runs a finalizer, e.g. an earlier test's unretrieved asyncio task logging itself (3.11's
    traceback formatting parses source for its carets); a paused collector runs none there."""
    source = path.read_text()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename=str(path))
    finally:
        if was_enabled:
            gc.enable()


def _imported_names(tree: ast.AST, this: str, is_package: bool) -> Iterable[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = this.split(".") if is_package else this.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)  # `from pkg import submodule`


def import_graph(modules: Mapping[str, Path]) -> dict[str, frozenset[str]]:
    """module -> the project modules it imports (a name that is not a module counts as its module)."""
    graph: dict[str, frozenset[str]] = {}
    for name, path in modules.items():
        tree = parse_module(path)
        targets = set()
        for imported in _imported_names(tree, name, path.name == "__init__.py"):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = frozenset(targets)
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # recursion depth is bounded by the module count (a few hundred)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def collapse(graph: Graph, depth: int) -> dict[str, frozenset[str]]:
    """The same graph between packages: each module named by its first `depth` parts."""

    def short(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    merged: dict[str, set[str]] = {}
    for source, targets in graph.items():
        merged.setdefault(short(source), set()).update(short(t) for t in targets if short(t) != short(source))
    return {name: frozenset(targets) for name, targets in merged.items()}
