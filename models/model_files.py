"""Where model files live and whether they are the files the registry means.

Files are looked for in the models directory (`--models-dir`, `$LIVEFUSE_MODELS`, the per-user cache);
a registry row marked `bundled` is also found in `models/bundled/`, the small permissively licensed files
that ship with the repository so the default engine runs on a fresh clone with no flag and no download.
A copy in the models directory wins (even a broken one, which then fails loudly rather than falling back).

Every file is sha256-verified before a session is built: a truncated or swapped copy must fail loudly,
not produce a blurry face. Rows without a registered hash (weights users download themselves) are
checked against a pin, a sha256sum-style `<file>.sha256` sidecar written by `models fetch` on first
download or by `models pin` for a copied-in file; without a pin, loading is refused.

Hashing a 554 MB swapper takes seconds, so each file is hashed once per process; the cache is keyed by
path, size, inode and mtime_ns, so a file replaced while the process runs is hashed again.
"""

import hashlib
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import onnxruntime as ort

from models.batch_conversion import convert_to_dynamic_batch
from models.errors import (
    ModelChecksumError,
    ModelContractError,
    ModelNotFoundError,
    ModelsDirectoryError,
    UnknownModelError,
)
from models.inference import InferenceConfig, create_session
from models.registry import MODELS, ModelSpec

logger = logging.getLogger(__name__)

MODELS_DIR_VARIABLE = "LIVEFUSE_MODELS"
SIDECAR_SUFFIX = ".sha256"
HASH_CHUNK_BYTES = 1 << 20
CLI = "python run_stream.py models"
BUNDLED_MODELS_DIR = Path(__file__).resolve().parent / "bundled"

FileState = Literal["ok", "missing", "mismatch", "unpinned"]


def converted_models_dir() -> Path:
    """Where dynamic-batch copies of fixed-batch models are cached (next to the per-user model cache)."""
    return default_cache_dir().parent / "converted"


def tensorrt_cache_dir() -> Path:
    """Where TensorRT keeps built engines and timing caches: building them takes minutes, so only the
    first start with `--execution-provider tensorrt` pays for it."""
    return default_cache_dir().parent / "tensorrt"


def default_cache_dir() -> Path:
    """Per-user cache: $XDG_CACHE_HOME/livefuse/models, else ~/.cache/livefuse/models."""
    cache_home = os.environ.get("XDG_CACHE_HOME", "")
    # the XDG spec says relative values are invalid and must be ignored
    base = Path(cache_home) if os.path.isabs(cache_home) else Path.home() / ".cache"
    return base / "livefuse" / "models"


def resolve_models_dir(flag: str | None, *, must_exist: bool = False) -> Path:
    """The models directory: `--models-dir`, then $LIVEFUSE_MODELS, then the per-user cache.

    Nothing is created here: listing models must not leave directories behind. With `must_exist`, a
    directory the user named (flag or variable) that is not there is a ModelsDirectoryError naming the
    fix; a missing per-user cache is fine (the bundled files cover the default engine).
    """
    if flag:
        source, path = "--models-dir", Path(flag)
    elif os.environ.get(MODELS_DIR_VARIABLE):
        source, path = f"${MODELS_DIR_VARIABLE}", Path(os.environ[MODELS_DIR_VARIABLE])
    else:
        source, path = "per-user cache", default_cache_dir()
    path = path.expanduser()
    if must_exist and source != "per-user cache" and not path.is_dir():
        raise ModelsDirectoryError(
            f"models directory {path} (from {source}) does not exist; fix: point {source} at a directory "
            f"with model files, or leave it unset to use the bundled default models ({BUNDLED_MODELS_DIR})"
        )
    logger.debug("models directory %s (from %s)", path, source)
    return path


def sha256_of_file(path: Path, chunk_bytes: int = HASH_CHUNK_BYTES) -> str:
    """Hex sha256 of a file, read in chunks so a half-gigabyte model never sits in memory."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def sidecar_path(model_path: Path) -> Path:
    """The pin file next to a model: `<file>.sha256`."""
    return model_path.with_name(model_path.name + SIDECAR_SUFFIX)


def read_pin(model_path: Path) -> str | None:
    """The pinned sha256 of `model_path`, or None without a (well-formed) sidecar."""
    sidecar = sidecar_path(model_path)
    try:
        fields = sidecar.read_text(encoding="utf-8").split()
    except FileNotFoundError:
        return None
    digest = fields[0].lower() if fields else ""
    if len(digest) != 64 or any(char not in "0123456789abcdef" for char in digest):
        logger.warning("ignoring malformed pin %s", sidecar)
        return None
    return digest


def write_pin(model_path: Path, digest: str) -> Path:
    """Write the sha256sum-format sidecar atomically (a half-written pin would lock the file out)."""
    sidecar = sidecar_path(model_path)
    temporary = sidecar.with_name(sidecar.name + ".tmp")
    temporary.write_text(f"{digest}  {model_path.name}\n", encoding="utf-8")
    os.replace(temporary, sidecar)
    return sidecar


class _DigestCache:
    """Process-wide memo of file digests: the same model is opened by several owners, hashed once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._digests: dict[tuple[str, int, int, int], str] = {}

    def digest(self, path: Path) -> str:
        status = path.stat()
        key = (str(path.resolve()), status.st_size, status.st_ino, status.st_mtime_ns)
        with self._lock:
            cached = self._digests.get(key)
        if cached is not None:
            return cached
        started = time.perf_counter()
        digest = sha256_of_file(path)  # outside the lock: hashing one file must not block another
        elapsed_s = time.perf_counter() - started
        # a multi-second pause (the 554 MB swapper) deserves an INFO line; small files only DEBUG
        logger.log(
            logging.INFO if elapsed_s >= 0.5 else logging.DEBUG,
            "sha256 of %s (%d bytes) in %.0f ms: %s",
            path.name,
            status.st_size,
            elapsed_s * 1000.0,
            digest,
        )
        with self._lock:
            self._digests[key] = digest
        return digest


_DIGESTS = _DigestCache()


@dataclass(frozen=True)
class FileCheck:
    """The verdict on one model file. `detail` is a full sentence that names the fix when not ok."""

    name: str
    path: Path
    state: FileState
    detail: str
    sha256: str | None = None
    pinned: bool = False  # True when the expected hash came from a sidecar, not the registry

    @property
    def ok(self) -> bool:
        return self.state == "ok"


class ModelStore:
    """Model files of one directory, verified before use.

    :param models_dir: directory holding the files (see `resolve_models_dir`)
    :param registry: name -> spec; the built-in registry unless given (tests pass their own rows)
    :param bundled_dir: where rows marked `bundled` are found when `models_dir` lacks them (None: nowhere)
    """

    def __init__(
        self,
        models_dir: Path,
        *,
        registry: Mapping[str, ModelSpec] | None = None,
        bundled_dir: Path | None = BUNDLED_MODELS_DIR,
    ) -> None:
        self.models_dir = Path(models_dir)
        self.bundled_dir = bundled_dir
        self._registry: Mapping[str, ModelSpec] = MODELS if registry is None else registry

    def names(self) -> list[str]:
        """Every model this store knows, registry order."""
        return list(self._registry)

    def spec(self, name: str) -> ModelSpec:
        """The spec of `name`, or UnknownModelError listing the known names."""
        try:
            return self._registry[name]
        except KeyError:
            known = ", ".join(sorted(self._registry))
            raise UnknownModelError(f"unknown model {name!r}; known: {known}") from None

    def file_path(self, name: str) -> Path:
        """Where the file of `name` is: the models directory's copy when there is one, else the bundled
        copy of a bundled row, else where it is expected in the models directory. Not verified."""
        spec = self.spec(name)
        own = self.models_dir / spec.file_name
        if own.is_file() or not spec.bundled or self.bundled_dir is None:
            return own
        shipped = self.bundled_dir / spec.file_name
        return shipped if shipped.is_file() else own

    def location(self, name: str) -> str:
        """Where the file of `name` was found: "models dir", "bundled" or "-" (nowhere)."""
        path = self.file_path(name)
        if not path.is_file():
            return "-"
        return "bundled" if self.bundled_dir is not None and path.parent == self.bundled_dir else "models dir"

    def is_available(self, name: str) -> bool:
        """Whether the file is present and verifies (`--engine auto` picks by this).

        A present file that fails is logged with its fix: falling back to another engine must not hide
        a corrupt or unpinned download.
        """
        verdict = self.check(name)
        if verdict.state != "ok" and verdict.state != "missing":
            logger.warning("%s is present but unusable: %s", name, verdict.detail)
        return verdict.ok

    def expected_sha256(self, name: str) -> str | None:
        """The hash a file must have: the registry's, else the pin next to the file, else None."""
        spec = self.spec(name)
        return spec.sha256 if spec.sha256 is not None else read_pin(self.file_path(name))

    def check(self, name: str) -> FileCheck:
        """Verify one file without raising: the verdict and, when not ok, the fix."""
        spec = self.spec(name)
        path = self.file_path(name)
        if not path.is_file():
            return FileCheck(name, path, "missing", self._missing_detail(spec, path))
        actual_size = path.stat().st_size
        if spec.size_bytes is not None and actual_size != spec.size_bytes:
            detail = (
                f"{path}: size {actual_size} bytes, expected {spec.size_bytes} (truncated or a different "
                f"file); fix: {CLI} fetch {name} (resumes and verifies), or replace the file"
            )
            return FileCheck(name, path, "mismatch", detail)
        expected = self.expected_sha256(name)
        pinned = spec.sha256 is None
        if expected is None:
            detail = (
                f"{path}: {name} has no registered sha256 and no pin {sidecar_path(path).name}, so it "
                f"cannot be verified and is not loaded; fix: {CLI} pin {name} if you trust this copy, "
                f"or {CLI} fetch {name} (pins on first download)"
            )
            return FileCheck(name, path, "unpinned", detail)
        actual = _DIGESTS.digest(path)
        if actual != expected:
            origin = f"the pin in {sidecar_path(path).name}" if pinned else "the registry"
            repin = f"; if you replaced it on purpose: {CLI} pin {name}" if pinned else ""
            detail = (
                f"{path}: sha256 {actual}, expected {expected} ({origin}); fix: {CLI} fetch {name} "
                f"or replace the file{repin}"
            )
            return FileCheck(name, path, "mismatch", detail, sha256=actual, pinned=pinned)
        return FileCheck(name, path, "ok", f"{path}: sha256 {actual} ok", sha256=actual, pinned=pinned)

    def path(self, name: str) -> Path:
        """The verified path of `name`; ModelNotFoundError or ModelChecksumError naming the fix."""
        verdict = self.check(name)
        if verdict.state == "missing":
            raise ModelNotFoundError(verdict.detail)
        if verdict.state != "ok":
            raise ModelChecksumError(verdict.detail)
        return verdict.path

    def pin(self, name: str) -> Path:
        """Trust the present file of a hash-less model: write its sidecar. Returns the sidecar path."""
        spec = self.spec(name)
        path = self.file_path(name)
        if spec.sha256 is not None:
            raise ModelChecksumError(
                f"{name} has a registered sha256; nothing to pin, check it with {CLI} verify {name}"
            )
        if not path.is_file():
            raise ModelNotFoundError(self._missing_detail(spec, path))
        digest = _DIGESTS.digest(path)
        sidecar = write_pin(path, digest)
        logger.info("pinned %s: sha256 %s written to %s", name, digest, sidecar)
        return sidecar

    def session(self, name: str, config: InferenceConfig) -> ort.InferenceSession:
        """Verify the file, then build its session (provider check and IO-contract check included)."""
        return create_session(self.path(name), self.spec(name), config)

    def batched_session(
        self, name: str, config: InferenceConfig, cache_dir: Path | None = None
    ) -> ort.InferenceSession:
        """`session` on a copy of the verified file that takes any batch (`models.batch_conversion`),
        so a file exported with batch 1 still runs N faces in one call. When no correct copy can be made
        (or cached), the verified batch-1 file is used, one call per face, and the reason is logged."""
        path = self.path(name)
        verdict = self.check(name)  # digest cached by path(): no second hash of the file
        try:
            model_path = convert_to_dynamic_batch(
                path, cache_dir or converted_models_dir(), source_sha256=verdict.sha256
            )
        except (ModelContractError, OSError) as error:
            logger.warning("%s: running with its fixed batch of 1: %s", name, error)
            model_path = path
        return create_session(model_path, self.spec(name), config)

    def _missing_detail(self, spec: ModelSpec, path: Path) -> str:
        if spec.urls:
            where = f"{CLI} fetch {spec.name} (or download {spec.urls[0]} into {self.models_dir})"
        else:
            where = f"copy {spec.file_name} into {self.models_dir} (no download URL is registered; docs/models.md says where it comes from)"
        return (
            f"model {spec.name} not found: {path} does not exist; fix: {where}, "
            f"or point --models-dir / ${MODELS_DIR_VARIABLE} at a directory that has it"
        )
