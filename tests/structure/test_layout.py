"""The design's shape kept by the test run: no import circle between modules or rooms, arrows only downward
(gpu_ops <- models <- streamer <- web), nothing in the product imports the benchmarks, every module opens
with a line that says why it exists, and none grows past 400 lines without saying why."""

import ast

import pytest

from tests.structure.import_graph import collapse, cycles, import_graph, project_modules

MODULES = project_modules()
GRAPH = import_graph(MODULES)
MAX_LINES = 400
# what each layer may import; the benchmarks (and run_stream, which dispatches to them) sit above it all
ALLOWED: dict[str, tuple[str, ...]] = {
    "gpu_ops": ("gpu_ops",),
    "models": ("gpu_ops", "models"),
    "streamer": ("gpu_ops", "models", "streamer"),
    "web": ("gpu_ops", "models", "streamer", "web"),
}
BENCH = "streamer.bench"


def _top(name: str) -> str:
    return name.split(".")[0]


def _in_bench(name: str) -> bool:
    return name == BENCH or name.startswith(BENCH + ".")


def layer_violations(graph: dict[str, frozenset[str]]) -> list[str]:
    """Every arrow that points up a layer, or from the product into the benchmarks."""
    found = []
    for source, targets in sorted(graph.items()):
        if source == "run_stream" or _in_bench(source):
            continue
        for target in sorted(targets):
            if _top(target) not in ALLOWED.get(_top(source), ()):
                found.append(f"{source} -> {target} (upward)")
            elif _in_bench(target):
                found.append(f"{source} -> {target} (the product imports a benchmark)")
    return found


def test_no_module_imports_in_a_circle() -> None:
    assert cycles(GRAPH) == []


def test_no_circle_between_rooms() -> None:
    """streamer.realtime, streamer.pipeline, web.* ... depend on each other one way only."""
    assert cycles(collapse(GRAPH, 2)) == []


def test_imports_point_down_the_layers_and_never_into_the_benchmarks() -> None:
    assert layer_violations(GRAPH) == []


def test_the_checks_see_a_circle_and_an_upward_arrow() -> None:
    """The checks above can fail: a made-up graph with both faults is caught."""
    graph = {
        "models.detector": frozenset({"streamer.pipeline.face_tracker"}),
        "streamer.pipeline.face_tracker": frozenset({"models.detector"}),
        "streamer.realtime.batch_worker": frozenset({"streamer.bench.gpu_bench"}),
        "streamer.bench.gpu_bench": frozenset({"web.app"}),
    }
    assert cycles(graph) == [["models.detector", "streamer.pipeline.face_tracker"]]
    assert layer_violations(graph) == [
        "models.detector -> streamer.pipeline.face_tracker (upward)",
        "streamer.realtime.batch_worker -> streamer.bench.gpu_bench (the product imports a benchmark)",
    ]


def test_the_graph_sees_imports_inside_functions_and_package_imports() -> None:
    assert "web.whip" in GRAPH["web.app"]  # `from web import ... whip`
    assert "streamer.bench.live_bench" in GRAPH["streamer.bench.command"]  # imported inside run()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_opens_with_why_it_exists_and_stays_small(name: str) -> None:
    path = MODULES[name]
    source = path.read_text()
    docstring = ast.get_docstring(ast.parse(source))
    assert docstring and docstring.strip(), f"{path} has no opening docstring"
    lines = len(source.splitlines())
    if lines > MAX_LINES:
        assert "400 lines" in docstring, f"{path} has {lines} lines and its docstring does not say why"
