"""Fixtures of the room tests: a private network namespace the test thread enters, and a real Janus in
it. Skipped with the reason when the namespace cannot be made or Janus is not installed."""

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.clients.janus_server import JanusServer, janus_missing_reason
from bench.clients.network_namespace import ADDRESS, entered, namespace, unavailable_reason
from streamer.transport.ice_addresses import restrict_ice_addresses


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((ADDRESS, 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def in_namespace() -> Iterator[str]:
    """The test thread inside a fresh namespace (ICE restricted to its address) for the test."""
    reason = unavailable_reason() or janus_missing_reason()
    if reason:
        pytest.skip(reason)
    try:
        made = namespace()
        name = made.__enter__()
    except (OSError, subprocess.SubprocessError) as error:
        pytest.skip(f"no network namespace here: {error}")
    try:
        with entered(name):
            restrict_ice_addresses([ADDRESS])
            yield name
    finally:
        restrict_ice_addresses([])
        made.__exit__(None, None, None)


@pytest.fixture
def janus(in_namespace: str, tmp_path: Path) -> Iterator[JanusServer]:
    with JanusServer(tmp_path / "janus", _free_port()) as server:
        yield server
