"""Shared fixtures: where the real models and photos are, and the loopback-only ICE rule.

Real models come from LIVEFUSE_MODELS (CI sets it); when unset, the checkout's sibling `shared/`
is used if present, else tests that need them are skipped with the reason.
"""

import logging
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
_SHARED = REPO_ROOT.parent / "shared"


def _dir_from_env(variable: str, fallback: Path) -> Path | None:
    value = os.environ.get(variable)
    if value:
        return Path(value).resolve()  # CI passes ../shared/...; browsers and subprocesses need absolute paths
    return fallback if fallback.is_dir() else None


@pytest.fixture(scope="session")
def models_dir() -> Path:
    path = _dir_from_env("LIVEFUSE_MODELS", _SHARED / "models")
    if path is None or not path.is_dir():
        pytest.skip("real models not available: set LIVEFUSE_MODELS to a directory of model files")
    return path


@pytest.fixture(scope="session")
def media_dir() -> Path:
    path = _dir_from_env("LIVEFUSE_MEDIA", _SHARED / "media")
    if path is None or not path.is_dir():
        pytest.skip("test media not available: set LIVEFUSE_MEDIA to a directory of face photos")
    return path


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("DEBUG"):
        logging.basicConfig(level=logging.DEBUG)


@pytest.fixture(autouse=True)
def fresh_encoder_effort(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own VP8 effort: the process-wide one would carry a strained cadence (a test's slow
    fake swap) into the next test's encoders."""
    from streamer.transport import codec_tuning, encoder_effort
    from web import engine

    effort = encoder_effort.EncoderEffort()
    monkeypatch.setattr(codec_tuning, "encoder_effort", effort)
    monkeypatch.setattr(engine, "encoder_effort", effort)
