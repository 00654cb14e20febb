"""Make a batch-1 ONNX export batchable: dim 0 of every graph input/output becomes the symbolic "N".

inswapper_128 (and other exports) fix the batch at 1, so many faces would need many session runs. The copy
made here runs N faces in one call. Besides the IO shapes, exports bake the 1 into Reshape shape constants
(`Reshape(x, [1, 512, 1, 1])`); those get a new Constant node whose first entry is 0 ("copy dim 0 from the
input", ONNX Reshape semantics with allowzero=0), so the batch flows through. Stale `value_info` shapes are
dropped and re-inferred by ONNX Runtime. Initializers are never reordered or rewritten: inswapper's `emap`
stays the last initializer, where `models.swapper.extract_emap` looks for it.

The rewrite assumes dim 0 is the batch everywhere. A graph that moves the batch into another axis would
convert into a wrong model, so before a copy enters the cache it must run a batch of 2 equal to 2 runs of
1 (on CPU, once per file); otherwise ModelContractError, and the caller keeps the batch-1 original. The
converted file is cached once in `cache_dir`, keyed by the source file's sha256.
"""

import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from numpy.typing import NDArray
from onnx import helper, numpy_helper

from models.errors import ModelContractError

logger = logging.getLogger(__name__)

BATCH_DIM_NAME = "N"
_CHUNK_BYTES = 1 << 20
_CHECK_BATCH = 2


@dataclass(frozen=True)
class ConversionReport:
    """What `make_batch_dynamic` changed, so the log (and tests) can say it."""

    inputs_changed: tuple[str, ...]
    outputs_changed: tuple[str, ...]
    reshapes_rewritten: tuple[str, ...]
    value_info_dropped: int
    last_initializer: str | None  # name of the last initializer after conversion (inswapper: "emap")


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, read in chunks (model files are hundreds of MB)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _set_batch_symbolic(value_info: onnx.ValueInfoProto) -> bool:
    dims = value_info.type.tensor_type.shape.dim
    if not dims:
        return False
    first = dims[0]
    if first.HasField("dim_param") and first.dim_param == BATCH_DIM_NAME:
        return False
    first.Clear()
    first.dim_param = BATCH_DIM_NAME
    return True


def _constant_values(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Tensor values known statically: initializers and Constant nodes with a `value` attribute."""
    values = {tensor.name: numpy_helper.to_array(tensor) for tensor in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attribute.t)
    return values


def _rewrite_baked_reshapes(graph: onnx.GraphProto) -> list[str]:
    """Point every Reshape whose constant shape starts with 1 at a new Constant starting with 0."""
    constants = _constant_values(graph)
    rewritten: list[str] = []
    new_nodes: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        if node.op_type == "Reshape" and len(node.input) > 1:
            allow_zero = any(a.name == "allowzero" and a.i == 1 for a in node.attribute)
            shape = constants.get(node.input[1])
            if shape is not None and shape.ndim == 1 and shape.size and shape[0] == 1 and not allow_zero:
                dynamic_shape = shape.astype(np.int64).copy()
                dynamic_shape[0] = 0
                constant_name = f"{node.name or node.output[0]}_dynamic_batch_shape_{index}"
                new_nodes.append(
                    helper.make_node(
                        "Constant",
                        [],
                        [constant_name],
                        name=constant_name,
                        value=numpy_helper.from_array(dynamic_shape, constant_name),
                    )
                )
                node.input[1] = constant_name
                rewritten.append(node.name or node.output[0])
        new_nodes.append(node)
    del graph.node[:]
    graph.node.extend(new_nodes)
    return rewritten


def make_batch_dynamic(model: onnx.ModelProto) -> ConversionReport:
    """Rewrite `model` in place so dim 0 of its inputs/outputs is symbolic; see the module docstring."""
    graph = model.graph
    initializer_names = {tensor.name for tensor in graph.initializer}
    inputs_changed = tuple(
        value.name
        for value in graph.input
        if value.name not in initializer_names and _set_batch_symbolic(value)
    )
    outputs_changed = tuple(value.name for value in graph.output if _set_batch_symbolic(value))
    reshapes = tuple(_rewrite_baked_reshapes(graph))
    value_info_dropped = len(graph.value_info)
    del graph.value_info[:]
    last = graph.initializer[-1].name if len(graph.initializer) else None
    return ConversionReport(inputs_changed, outputs_changed, reshapes, value_info_dropped, last)


def _random_inputs(session: ort.InferenceSession, batch: int) -> dict[str, NDArray[np.generic]] | None:
    """Seeded inputs for every graph input with batch `batch`; None when another dim is symbolic."""
    rng = np.random.default_rng(0)
    feeds: dict[str, NDArray[np.generic]] = {}
    for arg in session.get_inputs():
        rest = arg.shape[1:]
        if not all(isinstance(dim, int) for dim in rest):
            return None
        dtype = np.float16 if arg.type == "tensor(float16)" else np.float32
        if arg.type not in ("tensor(float)", "tensor(float16)"):
            return None
        feeds[arg.name] = rng.random((batch, *rest)).astype(dtype)
    return feeds


def check_batch_equivalence(path: Path) -> None:
    """Raise ModelContractError unless a batch of 2 gives what 2 single runs give (CPU, seeded input).

    Models with other symbolic dims (detectors) or non-float inputs are not checked (logged).
    """
    options = ort.SessionOptions()
    options.log_severity_level = 3  # "unused initializer emap" is expected, not news
    session = ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    feeds = _random_inputs(session, _CHECK_BATCH)
    if feeds is None:
        logger.info("%s: inputs have other symbolic dims; batch equivalence not checked", path.name)
        return
    try:
        together = session.run(None, feeds)
        singles = [
            session.run(None, {k: v[i : i + 1] for k, v in feeds.items()}) for i in range(_CHECK_BATCH)
        ]
    except Exception as exc:  # ORT raises its own error types for shape/Reshape failures
        raise ModelContractError(
            f"{path.name}: the batch-{BATCH_DIM_NAME} copy does not run ({exc})"
        ) from exc
    for index, batched_output in enumerate(together):
        expected = np.concatenate([single[index] for single in singles]).astype(np.float32)
        actual = np.asarray(batched_output, dtype=np.float32)
        tolerance = (1e-2 if batched_output.dtype == np.float16 else 1e-4) * (
            1.0 + float(np.abs(expected).max())
        )
        if actual.shape != expected.shape or not np.allclose(actual, expected, rtol=0, atol=tolerance):
            raise ModelContractError(
                f"{path.name}: a batch of {_CHECK_BATCH} differs from {_CHECK_BATCH} single runs "
                "(the graph mixes the batch into another axis); keep the batch-1 file"
            )


def converted_path(src: Path, cache_dir: Path, sha256: str) -> Path:
    """Where the dynamic-batch copy of `src` with content hash `sha256` lives in `cache_dir`."""
    return cache_dir / f"{src.stem}.{sha256[:16]}.batch{BATCH_DIM_NAME}.onnx"


def refusal_path(destination: Path) -> Path:
    """Marker next to a would-be copy that failed the batch check: its text is the reason."""
    return destination.with_name(destination.name + ".refused")


def convert_to_dynamic_batch(src: Path, cache_dir: Path, *, source_sha256: str | None = None) -> Path:
    """Path of a copy of `src` with a symbolic batch dim; converts once, then reuses the cached file.

    The cache key is the sha256 of `src` (pass `source_sha256` when the caller has just verified it, to
    skip hashing hundreds of MB again), so a replaced model file gets a fresh conversion. The file is
    written under a temporary name and renamed, so a crash never leaves a half-written cache entry. A copy
    that fails `check_batch_equivalence` is not kept; a `.refused` marker makes later calls fail fast.
    """
    if not src.is_file():
        raise ModelContractError(f"cannot convert {src}: no such file")
    sha256 = source_sha256 or file_sha256(src)
    destination = converted_path(src, cache_dir, sha256)
    if destination.is_file():
        logger.debug("dynamic-batch copy of %s found at %s", src.name, destination)
        return destination
    refusal = refusal_path(destination)
    if refusal.is_file():  # converting hundreds of MB again would only fail again
        raise ModelContractError(
            f"{refusal.read_text(encoding='utf-8').strip()} (verdict cached in {refusal})"
        )
    try:
        model = onnx.load(str(src))
    except Exception as exc:  # onnx raises DecodeError/ValueError variants; all mean "not a model"
        raise ModelContractError(f"cannot convert {src}: not a readable ONNX file ({exc})") from exc
    report = make_batch_dynamic(model)
    if not report.inputs_changed:
        logger.info("%s: inputs already have a symbolic batch dim; copying unchanged", src.name)
    cache_dir.mkdir(parents=True, exist_ok=True)
    descriptor, temporary_name = tempfile.mkstemp(dir=cache_dir, prefix=destination.name, suffix=".tmp")
    os.close(descriptor)
    try:
        onnx.save(model, temporary_name)
        try:
            check_batch_equivalence(Path(temporary_name))
        except ModelContractError as error:
            refusal.write_text(f"{error}\n", encoding="utf-8")
            raise
        os.replace(temporary_name, destination)
    finally:
        if os.path.exists(temporary_name):
            os.unlink(temporary_name)
    logger.info(
        "%s converted to batch %s at %s: inputs %s, outputs %s, %d Reshape constants rewritten, "
        "%d value_info dropped, last initializer %r (position %d of %d, unchanged)",
        src.name,
        BATCH_DIM_NAME,
        destination,
        list(report.inputs_changed),
        list(report.outputs_changed),
        len(report.reshapes_rewritten),
        report.value_info_dropped,
        report.last_initializer,
        len(model.graph.initializer) - 1,
        len(model.graph.initializer),
    )
    return destination
