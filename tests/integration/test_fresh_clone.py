"""A new user's first hour, as a test: the committed HEAD cloned into a temporary folder with no
../shared beside it, an empty home (no model cache), a fresh virtual environment, `pip install -r
requirements.txt`, then `serve` with no models flag until /ready says true, and a file `swap` with no
models flag. Only the bundled models (models/bundled/) are there to find.

The venv is made with `--system-site-packages` so that `pip install -r requirements.txt` is satisfied by
what this machine has installed and needs no internet (tests never download anything); `--no-index` makes
pip fail rather than reach for the network if anything were missing. What it proves is that the clone and
its requirement list are enough, not that PyPI serves the wheels.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import cv2
import numpy as np
import pytest

from bench.clients.daemon_process import free_loopback_port
from tests.conftest import REPO_ROOT

READY_TIMEOUT_S = 90.0
STEP_TIMEOUT_S = 300


def _step(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False
    )
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ready", timeout=2) as response:
            return bool(json.loads(response.read()).get("ready"))
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return False


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(the clone, its venv's python, a user's environment with an empty home and no model variables)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = tmp_path_factory.mktemp("new-user")
    clone, home = root / "livefuse", root / "home"
    home.mkdir()
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LIVEFUSE_", "XDG_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["HOME"] = str(home)
    env["PIP_NO_INDEX"] = "1"  # offline: satisfied from the system's site-packages or it fails
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _step(["git", "clone", "--quiet", "--no-checkout", str(REPO_ROOT), str(clone)], root, env)
    _step(["git", "checkout", "--quiet", head], clone, env)
    assert not (root / "shared").exists() and not (clone.parent / "shared").exists()
    _step([sys.executable, "-m", "venv", "--system-site-packages", str(root / "venv")], root, env)
    python = root / "venv" / "bin" / "python"
    _step([str(python), "-m", "pip", "install", "--quiet", "-r", "requirements.txt"], clone, env)
    return clone, python, env


def test_the_clone_serves_with_no_models_flag(fresh_clone: tuple[Path, Path, dict[str, str]]) -> None:
    clone, python, env = fresh_clone
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    log = clone.parent / "serve.log"
    with log.open("wb") as output:
        daemon = subprocess.Popen(
            [str(python), "run_stream.py", "serve", "--port", str(port), "--ice-address", "127.0.0.1"],
            cwd=clone,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _ready(url):
            assert daemon.poll() is None, f"serve exited with {daemon.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, (
                f"not ready after {READY_TIMEOUT_S} s:\n{log.read_text()[-3000:]}"
            )
            time.sleep(0.3)
        with urllib.request.urlopen(f"{url}/api/capabilities", timeout=5) as response:
            capabilities = json.loads(response.read())
        assert capabilities["default_engine"] == "mesh" and capabilities["engines"]["mesh"]["available"]
        assert str(clone / "models" / "bundled") in log.read_text()  # the models came from the clone
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    assert daemon.returncode == 0, log.read_text()[-3000:]


def test_the_clone_swaps_a_file_with_no_models_flag(
    fresh_clone: tuple[Path, Path, dict[str, str]], media_dir: Path
) -> None:
    clone, python, env = fresh_clone
    output = clone.parent / "swapped.png"
    target = media_dir / "fr_obama.jpg"
    command = [str(python), "run_stream.py", "swap", "--source", str(media_dir / "fr_biden2.jpg")]
    result = _step([*command, "--target", str(target), "--output", str(output)], clone, env)
    assert "bundled" in result.stderr  # loaded from models/bundled/
    swapped, original = cv2.imread(str(output)), cv2.imread(str(target))
    assert swapped is not None and original is not None and swapped.shape == original.shape
    assert float(np.mean(np.abs(swapped.astype(np.float32) - original))) > 0.5  # the face changed
    assert not (Path(env["HOME"]) / ".cache" / "livefuse" / "models").exists()  # nothing was fetched
