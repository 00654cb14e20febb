"""The design's shape kept by the test run: no import circle between modules or rooms, arrows only downward
(gpu_ops <- models <- streamer <- web <- bench), nothing in the product imports the benchmarks, every module opens
with a line that says why it exists, and none grows past 400 lines without saying why."""

import ast

import pytest

from tests.structure.import_graph import collapse, cycles, import_graph, parse_module, project_modules

MODULES = project_modules()
GRAPH = import_graph(MODULES)
MAX_LINES = 400
# what each floor may import, bottom up: the product (gpu_ops < models < streamer < web), then the
# benchmarks and their loopback clients above it, then run_stream, which dispatches to all of them
ALLOWED: dict[str, tuple[str, ...]] = {
    "gpu_ops": ("gpu_ops",),
    "models": ("gpu_ops", "models"),
    "streamer": ("gpu_ops", "models", "streamer"),
    "web": ("gpu_ops", "models", "streamer", "web"),
    "bench": ("gpu_ops", "models", "streamer", "web", "bench"),
    "run_stream": ("gpu_ops", "models", "streamer", "web", "bench"),
}


def _top(name: str) -> str:
    return name.split(".")[0]


def layer_violations(graph: dict[str, frozenset[str]]) -> list[str]:
    """Every arrow that points up a floor (the product importing the benchmarks is one of them)."""
    found = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            if _top(target) not in ALLOWED[_top(source)]:
                found.append(f"{source} -> {target} (upward)")
    return found


def test_no_module_imports_in_a_circle() -> None:
    assert cycles(GRAPH) == []


def test_no_circle_between_rooms() -> None:
    """streamer.realtime, streamer.pipeline, web.* ... depend on each other one way only."""
    assert cycles(collapse(GRAPH, 2)) == []


def test_imports_point_down_the_floors_and_never_into_the_benchmarks() -> None:
    assert layer_violations(GRAPH) == []


def test_the_checks_see_a_circle_and_an_upward_arrow() -> None:
    """The checks above can fail: a made-up graph with both faults is caught."""
    graph = {
        "models.detector": frozenset({"streamer.pipeline.face_tracker"}),
        "streamer.pipeline.face_tracker": frozenset({"models.detector"}),
        "streamer.realtime.batch_worker": frozenset({"bench.gpu_bench"}),
        "bench.gpu_bench": frozenset({"web.app"}),
    }
    assert cycles(graph) == [["models.detector", "streamer.pipeline.face_tracker"]]
    assert layer_violations(graph) == [
        "models.detector -> streamer.pipeline.face_tracker (upward)",
        "streamer.realtime.batch_worker -> bench.gpu_bench (upward)",
    ]
    assert client_violations({"bench.clients.peer_client": frozenset({"bench.live_bench"})}) == [
        "bench.clients.peer_client -> bench.live_bench"
    ]


def client_violations(graph: dict[str, frozenset[str]]) -> list[str]:
    """Arrows from the loopback clients into the benchmarks: tests import the clients, and must not pull
    the benchmarks in with them."""
    return [
        f"{source} -> {target}"
        for source, targets in sorted(graph.items())
        if source.startswith("bench.clients")
        for target in sorted(targets)
        if _top(target) == "bench" and not target.startswith("bench.clients") and target != "bench"
    ]


def test_the_loopback_clients_import_no_benchmark() -> None:
    assert client_violations(GRAPH) == []


def test_the_graph_sees_imports_inside_functions_and_package_imports() -> None:
    assert "web.whip" in GRAPH["web.app"]  # `from web import ... whip`
    assert "bench.live_bench" in GRAPH["bench.command"]  # imported inside run()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_opens_with_why_it_exists_and_stays_small(name: str) -> None:
    path = MODULES[name]
    source = path.read_text()
    docstring = ast.get_docstring(parse_module(path))
    assert docstring and docstring.strip(), f"{path} has no opening docstring"
    lines = len(source.splitlines())
    if lines > MAX_LINES:
        assert "400 lines" in docstring, f"{path} has {lines} lines and its docstring does not say why"
