"""The model files shipped in models/bundled/: every file is a `bundled` registry row with its registered
size and sha256, listed in the folder's README with a licence text beside it, kept by git, and found by a
store whose models directory is empty (a fresh clone), while a copy in the models directory wins."""

import subprocess
from pathlib import Path

import pytest

from models.errors import ModelsDirectoryError
from models.model_files import BUNDLED_MODELS_DIR, ModelStore, resolve_models_dir, sha256_of_file
from models.registry import MODELS

REPO_ROOT = Path(__file__).resolve().parents[3]
BUNDLED = {name: spec for name, spec in MODELS.items() if spec.bundled}
DOCUMENTS = {"README.md", "LICENSE-Apache-2.0.txt"}


def test_the_default_engines_models_are_bundled() -> None:
    from streamer.pipeline.pipeline_settings import PipelineConfig

    config = PipelineConfig()
    assert {config.detector, config.landmarker} <= set(BUNDLED)


def test_every_bundled_file_is_a_bundled_row_and_every_row_its_file() -> None:
    files = {path.name for path in BUNDLED_MODELS_DIR.iterdir()} - DOCUMENTS
    assert files == {spec.file_name for spec in BUNDLED.values()}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_file_has_its_registered_size_hash_and_a_licence(name: str) -> None:
    spec = BUNDLED[name]
    path = BUNDLED_MODELS_DIR / spec.file_name
    assert spec.sha256 is not None and spec.commercial_use
    assert path.stat().st_size == spec.size_bytes
    assert sha256_of_file(path) == spec.sha256
    readme = (BUNDLED_MODELS_DIR / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith(f"| {spec.file_name} |"))
    assert spec.sha256 in row and str(spec.size_bytes) in row
    licence_file = row.split("](", 1)[1].split(")", 1)[0]
    assert (BUNDLED_MODELS_DIR / licence_file).is_file() and spec.licence.split()[0] in row


def test_git_keeps_the_bundled_files() -> None:
    paths = [str(BUNDLED_MODELS_DIR / spec.file_name) for spec in BUNDLED.values()]
    ignored = subprocess.run(
        ["git", "check-ignore", *paths], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert ignored.stdout == "", f".gitignore drops {ignored.stdout}"


def test_an_empty_models_dir_finds_the_bundled_files(tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    for name, spec in BUNDLED.items():
        assert store.path(name) == BUNDLED_MODELS_DIR / spec.file_name
        assert store.location(name) == "bundled"
    unbundled = next(name for name, spec in MODELS.items() if not spec.bundled and spec.role == "detector")
    assert store.location(unbundled) == "-" and store.file_path(unbundled).parent == tmp_path


def test_a_copy_in_the_models_dir_wins_even_when_broken(tmp_path: Path) -> None:
    spec = MODELS["yunet_n"]
    own = tmp_path / spec.file_name
    assert spec.size_bytes is not None
    own.write_bytes(b"\0" * spec.size_bytes)  # the right size, the wrong bytes
    store = ModelStore(tmp_path)
    assert store.file_path("yunet_n") == own and store.location("yunet_n") == "models dir"
    assert store.check("yunet_n").state == "mismatch"  # fails loudly, no silent fallback


def test_without_a_bundled_folder_a_missing_file_is_missing(tmp_path: Path) -> None:
    store = ModelStore(tmp_path, bundled_dir=None)
    assert store.check("yunet_n").state == "missing"


def test_a_named_models_dir_must_exist_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere"
    assert resolve_models_dir(str(missing)) == missing
    with pytest.raises(ModelsDirectoryError, match="--models-dir.*fix:"):
        resolve_models_dir(str(missing), must_exist=True)
    monkeypatch.setenv("LIVEFUSE_MODELS", str(missing))
    with pytest.raises(ModelsDirectoryError, match="LIVEFUSE_MODELS"):
        resolve_models_dir(None, must_exist=True)
    monkeypatch.delenv("LIVEFUSE_MODELS")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    assert not resolve_models_dir(None, must_exist=True).exists()  # the cache may be absent: bundled files
