"""The style guide's mechanical rules, kept by the test run: ruff over the tree, mypy (strict defs) over
the code and the tests. Versions are pinned in requirements-dev.txt so a new release cannot fail CI."""

import subprocess
import sys
import tempfile

from tests.conftest import REPO_ROOT

PACKAGES = ("gpu_ops", "models", "streamer", "web", "bench", "run_stream.py", "tests")


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *command],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_ruff_finds_nothing() -> None:
    result = _run("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing() -> None:
    with tempfile.TemporaryDirectory() as cache:
        result = _run("mypy", "--cache-dir", cache, *PACKAGES)
    assert result.returncode == 0, result.stdout + result.stderr
