"""Every mistake on the command line is one line on stderr naming the fix, exit code 2, no traceback:
ports (out of range, not a number, in use, an address not of this machine), paths (a models directory,
a source, a target, an output folder, TLS files that are not there) and unknown choices (provider,
engine, subcommand). `--execution-provider auto` is accepted and the default; `--help` shows defaults."""

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from run_stream import build_parser
from tests.conftest import REPO_ROOT

TIMEOUT_S = 120


def _run(*argv: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """run_stream.py with WARNING logs, so stderr holds only what a mistake prints."""
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "run_stream.py"), "--log-level", "WARNING", *map(str, argv)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
        check=False,
    )


def _one_line_exit_2(result: subprocess.CompletedProcess[str], *named: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for word in named:
        assert word in lines[0], (word, lines[0])
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("serve", "--port", "99999"), ("--port", "99999", "1-65535")),
        (("serve", "--port", "eighty"), ("--port", "eighty")),
        (("serve", "--execution-provider", "gpu"), ("--execution-provider", "'gpu'", "auto")),
        (("serve", "--engine", "faceswap"), ("--engine", "mesh")),
        (("launch",), ("'launch'", "serve")),
    ],
)
def test_bad_flag_values_are_one_line(argv: tuple[str, ...], named: tuple[str, ...]) -> None:
    line = _one_line_exit_2(_run(*argv), *named)
    assert "--help" in line  # where the rest is said


def test_a_port_in_use_names_another_port(busy_port: int) -> None:
    _one_line_exit_2(_run("serve", "--port", str(busy_port)), f"127.0.0.1:{busy_port}", "in use", "--port")


def test_an_address_not_of_this_machine_names_the_host_fix() -> None:
    _one_line_exit_2(_run("serve", "--host", "203.0.113.9", "--port", "0"), "203.0.113.9", "--host 127.0.0.1")


def test_a_missing_models_dir_flag_or_variable(tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    _one_line_exit_2(_run("serve", "--models-dir", nowhere), str(nowhere), "--models-dir", "fix:")
    env = {**os.environ, "LIVEFUSE_MODELS": str(nowhere)}
    _one_line_exit_2(_run("models", "list", env=env), str(nowhere), "LIVEFUSE_MODELS", "fix:")


def test_missing_files_are_named(tmp_path: Path, media_dir: Path) -> None:
    photo = media_dir / "fr_obama.jpg"
    _one_line_exit_2(_run("serve", "--source", tmp_path / "face.jpg"), "--source", "face.jpg")
    _one_line_exit_2(
        _run("serve", "--tls-cert", tmp_path / "c.pem", "--tls-key", tmp_path / "k.pem"), "c.pem"
    )
    swap = ("swap", "--source", photo, "--target")
    _one_line_exit_2(_run(*swap, tmp_path / "clip.mp4", "--output", tmp_path / "o.mp4"), "clip.mp4")
    _one_line_exit_2(_run(*swap, photo, "--output", tmp_path / "no" / "o.png"), str(tmp_path / "no"))
    _one_line_exit_2(
        _run("swap", "--source", tmp_path / "s.jpg", "--target", photo, "--output", "o.png"), "s.jpg"
    )


def test_auto_provider_is_accepted_and_the_default() -> None:
    for command in ("serve", "swap", "camera", "bench"):
        required = {
            "swap": ["--source", "a", "--target", "b", "--output", "c"],
            "camera": ["--device", "d", "--source", "a"],
        }
        args = build_parser().parse_args([command, *required.get(command, [])])
        assert args.execution_provider == "auto"
        args = build_parser().parse_args(
            [command, *required.get(command, []), "--execution-provider", "auto"]
        )
        assert args.execution_provider == "auto"


def test_help_shows_defaults_and_explains_the_port() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "run_stream.py"), "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "--port PORT TCP port of the page and the API (default: 8080)" in text
    assert "(default: 127.0.0.1)" in text and "(default: auto)" in text and "(default: yunet_n)" in text
    assert "(default: None)" not in text and "(default: False)" not in text


def test_serve_flags_asking_for_an_unavailable_feature_name_it(tmp_path: Path) -> None:
    """--enhancer without GFPGAN (and the inswapper it runs on): refused at start with the fix, not
    silently ignored on every frame. Only the bundled models are found in an empty directory."""
    empty = tmp_path / "models"
    empty.mkdir()
    result = _run("serve", "--port", "0", "--models-dir", empty, "--enhancer")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "enhancer is not available" in errors[0] and "gfpgan_1.4" in errors[0]
    assert "models fetch gfpgan_1.4" in errors[0]


def test_swap_flags_asking_for_an_unavailable_feature_name_it(tmp_path: Path, media_dir: Path) -> None:
    """`swap --enhancer` without GFPGAN: one line with the fix and exit 2, no output written (before,
    a warning and an unenhanced file)."""
    empty = tmp_path / "models"
    empty.mkdir()
    output = tmp_path / "out.png"
    photo = media_dir / "fr_biden.jpg"
    result = _run(
        "swap", "--source", photo, "--target", photo, "--output", output, "--models-dir", empty, "--enhancer"
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert (
        len(errors) == 1
        and "enhancer is not available" in errors[0]
        and "models fetch gfpgan_1.4" in errors[0]
    )
    assert not output.exists()
