"""Shared test doubles: an ONNX Runtime session look-alike that records its inputs.

`FakeSession` answers `get_inputs`/`get_outputs` like a real session built from a `ModelSpec` (so the
contract check passes or fails the same way) and returns what a `respond` callable computes from the
feeds, so tests can script real-shaped outputs without a model file.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from models.registry import ModelSpec

Feeds = dict[str, NDArray[np.float32]]
Responder = Callable[[Feeds], Sequence[NDArray[np.float32]]]


@dataclass(frozen=True)
class FakeNodeArg:
    """What `InferenceSession.get_inputs()` items expose: name, shape (str for symbolic dims), type."""

    name: str
    shape: list[int | str]
    type: str = "tensor(float)"


def _node_args(tensors: Sequence[tuple[str, Sequence[int | None]]]) -> list[FakeNodeArg]:
    return [
        FakeNodeArg(name, [f"dim{axis}" if dim is None else dim for axis, dim in enumerate(shape)])
        for name, shape in tensors
    ]


class FakeSession:
    """Records every `run` (output names and a copy of the feeds) and returns `respond(feeds)`."""

    def __init__(
        self,
        inputs: Sequence[tuple[str, Sequence[int | None]]],
        outputs: Sequence[tuple[str, Sequence[int | None]]],
        respond: Responder,
        providers: Sequence[str] = ("CPUExecutionProvider",),
    ) -> None:
        self._inputs = _node_args(inputs)
        self._outputs = _node_args(outputs)
        self._respond = respond
        self._providers = list(providers)
        self.calls: list[tuple[list[str], Feeds]] = []

    @classmethod
    def for_spec(
        cls, spec: ModelSpec, respond: Responder, *, batch: int | None = None, symbolic_batch: bool = False
    ) -> "FakeSession":
        """A session with the spec's IO contract; `batch` fixes dim 0 (as in files with batch 1),
        `symbolic_batch` frees it (as in a `models.batch_conversion` copy)."""

        def shapes(
            tensors: Sequence[tuple[str, tuple[int | None, ...]]],
        ) -> list[tuple[str, list[int | None]]]:
            result = []
            for name, shape in tensors:
                dims = list(shape)
                dims[0] = None if symbolic_batch else batch if batch is not None else dims[0]
                result.append((name, dims))
            return result

        return cls(
            shapes([(t.name, t.shape) for t in spec.inputs]),
            shapes([(t.name, t.shape) for t in spec.outputs]),
            respond,
        )

    def get_inputs(self) -> list[FakeNodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[FakeNodeArg]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def run(self, output_names: Sequence[str] | None, feeds: Feeds) -> list[NDArray[np.float32]]:
        self.calls.append(
            (list(output_names or []), {name: np.array(value) for name, value in feeds.items()})
        )
        produced = list(self._respond(feeds))
        names = [arg.name for arg in self._outputs]
        if output_names:
            return [produced[names.index(name)] for name in output_names]
        return produced
