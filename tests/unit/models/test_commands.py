"""`models list|verify|pin` through run_stream's parser, on a temporary directory (no network)."""

import hashlib
import io
from pathlib import Path

import pytest

import run_stream
from models import commands
from models.model_files import ModelStore, read_pin
from models.registry import MODELS, ModelSpec, TensorSpec

PAYLOAD = b"bytes standing in for weights\n" * 50
PAYLOAD_SHA256 = hashlib.sha256(PAYLOAD).hexdigest()


def _spec(name: str, sha256: str | None) -> ModelSpec:
    return ModelSpec(
        name=name,
        role="embedder",
        file_name=f"{name}.onnx",
        sha256=sha256,
        size_bytes=len(PAYLOAD) if sha256 else None,
        licence="test licence",
        description="test row",
        inputs=(TensorSpec("input", (None, 3, 8, 8)),),
        outputs=(TensorSpec("output", (None, 4)),),
        urls=("https://example.org/model.onnx",),
        commercial_use=False,
    )


@pytest.fixture(autouse=True)
def test_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(MODELS, "test_hashed", _spec("test_hashed", PAYLOAD_SHA256))
    monkeypatch.setitem(MODELS, "test_hashless", _spec("test_hashless", None))


def run_models(argv: list[str]) -> tuple[int, str]:
    args = run_stream.build_parser().parse_args(["models", *argv])
    out = io.StringIO()
    return commands.run(args, out), out.getvalue()


def _row(table: str, name: str) -> list[str]:
    return next(line.split() for line in table.splitlines() if line.startswith(name + " "))


def test_list_shows_every_model_and_its_state(tmp_path: Path) -> None:
    (tmp_path / "test_hashed.onnx").write_bytes(PAYLOAD)
    (tmp_path / "test_hashless.onnx").write_bytes(PAYLOAD)
    code, table = run_models(["list", "--models-dir", str(tmp_path)])
    assert code == 0
    assert f"models directory: {tmp_path}" in table
    assert _row(table, "test_hashed")[-3:] == ["ok", "models", "dir"]
    assert _row(table, "test_hashless")[-3:] == ["unpinned", "models", "dir"]
    assert _row(table, "yunet_s")[-2:] == ["missing", "-"]
    assert _row(table, "yunet_n")[-2:] == ["ok", "bundled"]  # shipped in models/bundled/
    assert _row(table, "test_hashed")[1:6] == ["embedder", "test_hashed.onnx", "2", "KB", "no"]
    assert len(table.splitlines()) == len(MODELS) + 3  # directory lines + header


def test_a_copy_in_the_models_dir_wins_over_the_bundled_one(tmp_path: Path) -> None:
    (tmp_path / MODELS["yunet_n"].file_name).write_bytes(b"not the model")
    code, table = run_models(["list", "--models-dir", str(tmp_path)])
    assert code == 0
    assert _row(table, "yunet_n")[-3:] == ["mismatch", "models", "dir"]


def test_a_named_models_dir_that_is_not_there_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_stream.main(["models", "list", "--models-dir", str(tmp_path / "nowhere")])
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "nowhere" in lines[0] and "fix:" in lines[0]


def test_models_dir_before_the_subcommand_is_kept(tmp_path: Path) -> None:
    args = run_stream.build_parser().parse_args(["models", "--models-dir", str(tmp_path), "verify"])
    assert args.models_dir == str(tmp_path)
    args = run_stream.build_parser().parse_args(["models", "list", "--models-dir", str(tmp_path)])
    assert args.models_dir == str(tmp_path)


@pytest.fixture
def no_bundled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands see only the temporary directory, not the files shipped in models/bundled/."""
    monkeypatch.setattr(commands, "ModelStore", lambda path: ModelStore(path, bundled_dir=None))


@pytest.mark.usefixtures("no_bundled")
def test_verify_reports_each_file_and_fails_on_any(tmp_path: Path) -> None:
    (tmp_path / "test_hashed.onnx").write_bytes(PAYLOAD)
    code, report = run_models(["verify", "--models-dir", str(tmp_path)])
    assert (code, report.count("\n")) == (0, 1)
    assert report.startswith("OK    test_hashed:")

    (tmp_path / "test_hashless.onnx").write_bytes(PAYLOAD)
    code, report = run_models(["verify", "--models-dir", str(tmp_path)])
    assert code == 1
    assert "FAIL  test_hashless:" in report
    assert "models pin test_hashless" in report


def test_verify_named_missing_model_fails(tmp_path: Path) -> None:
    code, report = run_models(["verify", "test_hashed", "--models-dir", str(tmp_path)])
    assert code == 1
    assert "FAIL  test_hashed: model test_hashed not found" in report


def test_verify_empty_directory_checks_the_bundled_files(tmp_path: Path) -> None:
    code, report = run_models(["verify", "--models-dir", str(tmp_path)])
    bundled = [name for name, spec in MODELS.items() if spec.bundled]
    assert code == 0 and bundled
    assert [line.split()[:2] for line in report.splitlines()] == [["OK", f"{name}:"] for name in bundled]


@pytest.mark.usefixtures("no_bundled")
def test_verify_without_any_file_is_not_a_failure(tmp_path: Path) -> None:
    code, report = run_models(["verify", "--models-dir", str(tmp_path)])
    assert (code, report) == (0, f"no model files in {tmp_path}\n")


def test_pin_then_verify(tmp_path: Path) -> None:
    (tmp_path / "test_hashless.onnx").write_bytes(PAYLOAD)
    code, report = run_models(["pin", "test_hashless", "--models-dir", str(tmp_path)])
    assert code == 0
    assert report == f"pinned test_hashless: {tmp_path / 'test_hashless.onnx.sha256'}\n"
    assert read_pin(tmp_path / "test_hashless.onnx") == PAYLOAD_SHA256
    code, report = run_models(["verify", "test_hashless", "--models-dir", str(tmp_path)])
    assert code == 0


def test_errors_become_one_line_and_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_stream.main(["models", "pin", "test_hashless", "--models-dir", str(tmp_path)]) == 2
    assert run_stream.main(["models", "verify", "no_such_model", "--models-dir", str(tmp_path)]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert errors[0].startswith("error: model test_hashless not found")
    assert errors[1].startswith("error: unknown model 'no_such_model'")


def test_fetch_with_url_takes_one_name(tmp_path: Path) -> None:
    argv = ["models", "fetch", "test_hashed", "test_hashless", "--url", "http://127.0.0.1:9/x.onnx"]
    assert run_stream.main([*argv, "--models-dir", str(tmp_path)]) == 2


def test_fetch_skips_a_verified_file_without_network(tmp_path: Path) -> None:
    (tmp_path / "test_hashed.onnx").write_bytes(PAYLOAD)
    code, report = run_models(["fetch", "test_hashed", "--models-dir", str(tmp_path)])
    assert (code, report) == (0, f"test_hashed: {tmp_path / 'test_hashed.onnx'} ok\n")
