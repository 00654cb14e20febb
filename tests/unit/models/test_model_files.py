"""ModelStore: directory resolution, verification (once per file version), error texts, sidecar pins."""

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from models import model_files
from models.errors import ModelChecksumError, ModelNotFoundError, UnknownModelError
from models.model_files import (
    ModelStore,
    read_pin,
    resolve_models_dir,
    sha256_of_file,
    sidecar_path,
    write_pin,
)
from models.registry import ModelSpec, TensorSpec

PAYLOAD = b"not really an onnx model, but bytes with a known hash\n" * 100
PAYLOAD_SHA256 = hashlib.sha256(PAYLOAD).hexdigest()


def make_spec(
    name: str, *, sha256: str | None, size_bytes: int | None, urls: tuple[str, ...] = ()
) -> ModelSpec:
    return ModelSpec(
        name=name,
        role="detector",
        file_name=f"{name}.onnx",
        sha256=sha256,
        size_bytes=size_bytes,
        licence="test",
        description="test row",
        inputs=(TensorSpec("input", (None, 3, None, None)),),
        outputs=(TensorSpec("output", (None, 1)),),
        urls=urls,
    )


@pytest.fixture
def registry() -> dict[str, ModelSpec]:
    return {
        "hashed": make_spec(
            "hashed",
            sha256=PAYLOAD_SHA256,
            size_bytes=len(PAYLOAD),
            urls=("https://example.org/hashed.onnx",),
        ),
        "hashless": make_spec("hashless", sha256=None, size_bytes=None, urls=("https://example.org/h.onnx",)),
        "no_url": make_spec("no_url", sha256=PAYLOAD_SHA256, size_bytes=len(PAYLOAD)),
    }


@pytest.fixture
def store(tmp_path: Path, registry: dict[str, ModelSpec]) -> ModelStore:
    return ModelStore(tmp_path, registry=registry)


@pytest.fixture
def hash_calls(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record every real hashing pass (the verify cache must avoid repeating them)."""
    calls: list[Path] = []
    real = model_files.sha256_of_file

    def counting(path: Path, chunk_bytes: int = model_files.HASH_CHUNK_BYTES) -> str:
        calls.append(path)
        return real(path, chunk_bytes)

    monkeypatch.setattr(model_files, "sha256_of_file", counting)
    return calls


# --- resolution order -------------------------------------------------------------------------------


def test_flag_wins_over_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LIVEFUSE_MODELS", str(tmp_path / "from_env"))
    assert resolve_models_dir(str(tmp_path / "from_flag")) == tmp_path / "from_flag"


def test_environment_wins_over_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LIVEFUSE_MODELS", str(tmp_path / "from_env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert resolve_models_dir(None) == tmp_path / "from_env"


def test_xdg_cache_home_when_no_flag_or_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LIVEFUSE_MODELS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    resolved = resolve_models_dir(None)
    assert resolved == tmp_path / "cache" / "livefuse" / "models"
    assert not resolved.exists()  # resolving must not create directories


@pytest.mark.parametrize("xdg_value", ["", "relative/cache"])
def test_home_cache_when_xdg_unset_or_relative(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, xdg_value: str
) -> None:
    monkeypatch.delenv("LIVEFUSE_MODELS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", xdg_value)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_models_dir(None) == tmp_path / ".cache" / "livefuse" / "models"


def test_flag_expands_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_models_dir("~/models") == tmp_path / "models"


# --- verification -----------------------------------------------------------------------------------


def test_sha256_of_file_streams_in_chunks(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(PAYLOAD)
    assert sha256_of_file(path, chunk_bytes=7) == PAYLOAD_SHA256


def test_path_returns_verified_file(store: ModelStore) -> None:
    (store.models_dir / "hashed.onnx").write_bytes(PAYLOAD)
    assert store.path("hashed") == store.models_dir / "hashed.onnx"
    assert store.check("hashed").sha256 == PAYLOAD_SHA256


def test_file_is_hashed_once_per_version(store: ModelStore, hash_calls: list[Path]) -> None:
    path = store.models_dir / "hashed.onnx"
    path.write_bytes(PAYLOAD)
    store.path("hashed")
    store.path("hashed")
    ModelStore(store.models_dir, registry={"hashed": store.spec("hashed")}).path("hashed")
    assert hash_calls == [path]


def test_changed_mtime_is_verified_again(store: ModelStore, hash_calls: list[Path]) -> None:
    path = store.models_dir / "hashed.onnx"
    path.write_bytes(PAYLOAD)
    store.path("hashed")
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))
    store.path("hashed")
    assert hash_calls == [path, path]


def test_replaced_file_with_same_size_fails(store: ModelStore) -> None:
    path = store.models_dir / "hashed.onnx"
    path.write_bytes(PAYLOAD)
    store.path("hashed")
    corrupted = bytearray(PAYLOAD)
    corrupted[10] ^= 0xFF
    path.write_bytes(bytes(corrupted))
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))
    with pytest.raises(ModelChecksumError):
        store.path("hashed")


def test_checksum_error_names_expected_actual_and_fix(store: ModelStore) -> None:
    wrong = b"x" * len(PAYLOAD)
    (store.models_dir / "hashed.onnx").write_bytes(wrong)
    with pytest.raises(ModelChecksumError) as caught:
        store.path("hashed")
    message = str(caught.value)
    assert hashlib.sha256(wrong).hexdigest() in message
    assert PAYLOAD_SHA256 in message
    assert "models fetch hashed" in message


def test_truncated_file_fails_on_size_without_hashing(store: ModelStore, hash_calls: list[Path]) -> None:
    (store.models_dir / "hashed.onnx").write_bytes(PAYLOAD[:100])
    with pytest.raises(ModelChecksumError) as caught:
        store.path("hashed")
    assert f"size 100 bytes, expected {len(PAYLOAD)}" in str(caught.value)
    assert hash_calls == []


def test_missing_file_names_directory_and_fetch_command(store: ModelStore) -> None:
    with pytest.raises(ModelNotFoundError) as caught:
        store.path("hashed")
    message = str(caught.value)
    assert str(store.models_dir / "hashed.onnx") in message
    assert "python run_stream.py models fetch hashed" in message
    assert "https://example.org/hashed.onnx" in message
    assert "--models-dir" in message


def test_missing_file_without_url_says_to_copy_it(store: ModelStore) -> None:
    with pytest.raises(ModelNotFoundError, match="no download URL"):
        store.path("no_url")


def test_is_available_means_present_and_verified(store: ModelStore, caplog: pytest.LogCaptureFixture) -> None:
    assert not store.is_available("hashed")
    (store.models_dir / "hashed.onnx").write_bytes(b"wrong")
    assert not store.is_available("hashed")
    assert "hashed is present but unusable" in caplog.text
    (store.models_dir / "hashed.onnx").write_bytes(PAYLOAD)
    assert store.is_available("hashed")


def test_unknown_name_lists_known_ones(store: ModelStore) -> None:
    with pytest.raises(UnknownModelError, match="hashed, hashless, no_url"):
        store.path("nope")


def test_default_registry_is_the_real_one(tmp_path: Path) -> None:
    assert ModelStore(tmp_path).spec("yunet_n").file_name == "det_yunet_n_dynamic.onnx"


# --- pins for rows without a registered hash --------------------------------------------------------


def test_hashless_file_without_pin_is_refused(store: ModelStore) -> None:
    (store.models_dir / "hashless.onnx").write_bytes(PAYLOAD)
    assert store.check("hashless").state == "unpinned"
    with pytest.raises(ModelChecksumError) as caught:
        store.path("hashless")
    assert "models pin hashless" in str(caught.value)


def test_pin_then_load_then_detect_substitution(store: ModelStore) -> None:
    path = store.models_dir / "hashless.onnx"
    path.write_bytes(PAYLOAD)
    sidecar = store.pin("hashless")
    assert sidecar == sidecar_path(path) == store.models_dir / "hashless.onnx.sha256"
    assert sidecar.read_text() == f"{PAYLOAD_SHA256}  hashless.onnx\n"
    verdict = store.check("hashless")
    assert (verdict.state, verdict.pinned) == ("ok", True)
    assert store.path("hashless") == path

    path.write_bytes(PAYLOAD + b"tampered")
    with pytest.raises(ModelChecksumError) as caught:
        store.path("hashless")
    assert "the pin in hashless.onnx.sha256" in str(caught.value)
    assert PAYLOAD_SHA256 in str(caught.value)


def test_pin_refuses_registered_and_missing_models(store: ModelStore) -> None:
    (store.models_dir / "hashed.onnx").write_bytes(PAYLOAD)
    with pytest.raises(ModelChecksumError, match="registered sha256"):
        store.pin("hashed")
    assert not sidecar_path(store.models_dir / "hashed.onnx").exists()
    with pytest.raises(ModelNotFoundError):
        store.pin("hashless")


def test_registry_hash_wins_over_a_sidecar(store: ModelStore) -> None:
    path = store.models_dir / "hashed.onnx"
    path.write_bytes(b"y" * len(PAYLOAD))
    write_pin(path, hashlib.sha256(b"y" * len(PAYLOAD)).hexdigest())
    with pytest.raises(ModelChecksumError):
        store.path("hashed")


@pytest.mark.parametrize("content", ["", "zz  file\n", "abc123  file\n"])
def test_malformed_pin_is_ignored(tmp_path: Path, content: str) -> None:
    path = tmp_path / "model.onnx"
    sidecar_path(path).write_text(content)
    assert read_pin(path) is None


def test_pin_accepts_sha256sum_output_in_upper_case(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    sidecar_path(path).write_text(f"{PAYLOAD_SHA256.upper()} *model.onnx\n")
    assert read_pin(path) == PAYLOAD_SHA256


def test_session_verifies_before_creating(
    store: ModelStore, registry: dict[str, ModelSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[Path] = []
    monkeypatch.setattr(model_files, "create_session", lambda path, spec, config: created.append(path))
    (store.models_dir / "hashed.onnx").write_bytes(b"z" * len(PAYLOAD))
    with pytest.raises(ModelChecksumError):
        store.session("hashed", model_files.InferenceConfig())
    assert created == []
    (store.models_dir / "hashed.onnx").write_bytes(PAYLOAD)
    store.session("hashed", model_files.InferenceConfig())
    assert created == [store.models_dir / "hashed.onnx"]


def test_file_check_is_frozen(store: ModelStore) -> None:
    verdict = store.check("hashed")
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.state = "ok"  # type: ignore[misc]
