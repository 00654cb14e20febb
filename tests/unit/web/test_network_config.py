"""`serve`'s network flags and their LIVEFUSE_* variables: the flag wins, blank variables are unset, and
every malformed value stops the start with exit code 2 and one line naming the fix."""

import os
import subprocess
import sys

import pytest

from gpu_ops.errors import InvalidInputError
from run_stream import build_parser
from streamer.pipeline.config_args import config_from_args
from streamer.transport.ice_host_candidates import PortRange
from tests.conftest import REPO_ROOT
from web.daemon_config import DaemonConfig

SECRET = "a-shared-secret-of-some-length"
VARIABLES = (
    "LIVEFUSE_ICE_SERVERS",
    "LIVEFUSE_TURN_SECRET",
    "LIVEFUSE_TURN_TTL",
    "LIVEFUSE_ICE_PORT_RANGE",
    "LIVEFUSE_PUBLIC_ADDRESS",
    "LIVEFUSE_PUBLIC_URL",
)


@pytest.fixture(autouse=True)
def no_network_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def config(*flags: str) -> DaemonConfig:
    return config_from_args(DaemonConfig, build_parser().parse_args(["serve", *flags]))


def test_defaults_keep_the_single_daemon_behaviour() -> None:
    defaults = config()
    assert defaults.ice.urls == () and defaults.ice.turn_secret is None
    assert defaults.ice_port_range is None and defaults.public_address is None
    assert defaults.public_url is None and defaults.location("/whip/a") == "/whip/a"


def test_flags_set_everything() -> None:
    configured = config(
        "--ice-servers", "stun:s.example,turn:t.example?transport=udp",
        "--turn-secret", SECRET, "--turn-ttl", "600",
        "--ice-port-range", "50000-50099",
        "--public-address", "203.0.113.9",
        "--public-url", "https://livefuse-0.example.com/",
    )  # fmt: skip
    assert [url.url for url in configured.ice.urls] == ["stun:s.example", "turn:t.example?transport=udp"]
    assert configured.ice.turn_secret == SECRET and configured.ice.turn_ttl_s == 600
    assert configured.ice_port_range == PortRange(50000, 50099)
    assert configured.public_address == "203.0.113.9"
    assert configured.location("/api/sessions/a") == "https://livefuse-0.example.com/api/sessions/a"


def test_variables_fill_in_for_absent_flags_and_the_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIVEFUSE_ICE_SERVERS", "turn:t.example")
    monkeypatch.setenv("LIVEFUSE_TURN_SECRET", SECRET)
    monkeypatch.setenv("LIVEFUSE_TURN_TTL", "120")
    monkeypatch.setenv("LIVEFUSE_ICE_PORT_RANGE", "40000-40009")
    monkeypatch.setenv("LIVEFUSE_PUBLIC_ADDRESS", "198.51.100.4")
    monkeypatch.setenv("LIVEFUSE_PUBLIC_URL", "http://10.0.0.5:8080")
    from_environment = config()
    assert [url.url for url in from_environment.ice.urls] == ["turn:t.example"]
    assert from_environment.ice.turn_ttl_s == 120
    assert from_environment.ice_port_range == PortRange(40000, 40009)
    assert from_environment.public_address == "198.51.100.4"
    assert from_environment.public_url == "http://10.0.0.5:8080"
    flagged = config("--public-url", "https://pod-1.example.com", "--ice-port-range", "1-2")
    assert flagged.public_url == "https://pod-1.example.com" and flagged.ice_port_range == PortRange(1, 2)


def test_blank_variables_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compose passes `${X:-}` as an empty string."""
    unset = config()
    for name in VARIABLES:
        monkeypatch.setenv(name, " ")
    assert config() == unset


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--ice-servers", "https://turn.example.com"), "--ice-servers"),
        (("--ice-servers", "turn:t.example"), "no --turn-secret"),
        (("--ice-servers", "turn:t.example", "--turn-secret", SECRET, "--turn-ttl", "1h"), "--turn-ttl"),
        (("--ice-port-range", "50099-50000"), "--ice-port-range"),
        (("--ice-port-range", "50000"), "give MIN-MAX"),
        (("--public-address", "nat.example.com"), "--public-address"),
        (("--public-url", "livefuse-0.example.com"), "--public-url"),
        (("--public-url", "https://h.example.com/?x=1"), "--public-url"),
        (("--public-url", "ftp://h.example.com"), "--public-url"),
    ],
)
def test_malformed_values_are_refused_naming_the_flag(flags: tuple[str, ...], says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        config(*flags)


@pytest.mark.parametrize(
    ("flags", "environment", "says"),
    [
        (["--ice-port-range", "9-1"], {}, "--ice-port-range 9-1"),
        ([], {"LIVEFUSE_ICE_SERVERS": "stun:ok.example,turn:"}, "--ice-servers: 'turn:'"),
    ],
)
def test_serve_exits_2_with_one_line(flags: list[str], environment: dict[str, str], says: str) -> None:
    result = subprocess.run(
        [sys.executable, "run_stream.py", "serve", "--port", "1", *flags],
        cwd=REPO_ROOT,
        env={**{k: v for k, v in os.environ.items() if k not in VARIABLES}, **environment},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.stderr
