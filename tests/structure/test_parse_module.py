"""The structure tests' parser survives a finalizer that parses during the parse (CPython 3.11's
"AST constructor recursion depth mismatch", which failed a CI run after an aiortc task was collected)."""

import ast
import gc

from tests.conftest import REPO_ROOT
from tests.structure.import_graph import parse_module

MODULE = REPO_ROOT / "models" / "detector_decoders.py"


class _ParsesWhenCollected:
    """Cyclic garbage whose finalizer parses and leaves another of itself, as a logged asyncio task does
    (3.11's traceback formatting parses source for its carets)."""

    live = False  # the chain stops when the parse under test is over

    def __init__(self) -> None:
        self.itself = self

    def __del__(self) -> None:
        if _ParsesWhenCollected.live:
            ast.parse("x = (1 + 2) * f(3)")
            _ParsesWhenCollected()


def _parse_while_finalizers_parse() -> ast.Module | SystemError:
    """Twenty parses with a collection at every allocation; the chain is stopped before pytest reports."""
    threshold = gc.get_threshold()
    _ParsesWhenCollected.live = True
    gc.set_threshold(1)
    _ParsesWhenCollected()
    try:
        for _ in range(20):
            tree = parse_module(MODULE)
        return tree
    except SystemError as error:
        return error
    finally:
        _ParsesWhenCollected.live = False
        gc.set_threshold(*threshold)
        gc.collect()


def test_parse_module_runs_no_finalizer_inside_the_parse() -> None:
    tree = _parse_while_finalizers_parse()
    assert isinstance(tree, ast.Module), tree
    assert any(isinstance(node, ast.FunctionDef) for node in tree.body)
    assert gc.isenabled()


def test_parse_module_leaves_a_paused_collector_paused() -> None:
    gc.disable()
    try:
        parse_module(MODULE)
        assert not gc.isenabled()
    finally:
        gc.enable()
