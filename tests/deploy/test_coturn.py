"""coturn's start script and config (deploy/kubernetes/base), shared by the Kubernetes Deployment and
compose.yaml.

The script is run for real with a stand-in `turnserver` that records what it was given. With Debian's
coturn installed, the real server is started from the same template on 127.0.0.1 and a TURN Allocate
with TURN REST credentials (RFC 8489 long-term credentials from the shared secret, as the daemon's
--turn-secret makes them) must get a relay address from the configured range, and a wrong secret must
not. .ci/run installs coturn; where it is missing these tests are skipped with the reason. A whole call
relayed through it is tests/deploy/test_turn_relay.py.
"""

import base64
import hashlib
import hmac
import os
import socket
import stat
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamer.transport.ice_servers import turn_rest_credential
from tests.deploy.coturn import SCRIPT, TEMPLATE, running_coturn
from tests.deploy.manifests import turnserver_options

FAKE_TURNSERVER = """#!/bin/sh
# stand-in for coturn: record the arguments and the config file it was pointed at
printf '%s\\n' "$@" > "$RECORD_DIR/args"
cp "$2" "$RECORD_DIR/conf"
"""

MAGIC_COOKIE = 0x2112A442
ALLOCATE = 0x0003
ALLOCATE_SUCCESS = 0x0103
ALLOCATE_ERROR = 0x0113
USERNAME, MESSAGE_INTEGRITY, ERROR_CODE, REALM, NONCE = 0x0006, 0x0008, 0x0009, 0x0014, 0x0015
XOR_RELAYED_ADDRESS, REQUESTED_TRANSPORT = 0x0016, 0x0019
UDP_TRANSPORT = 17


def run_script(tmp_path: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "turnserver"
    fake.write_text(FAKE_TURNSERVER, encoding="utf-8")
    fake.chmod(0o755)
    record = tmp_path / "record"
    record.mkdir(exist_ok=True)
    env = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "RECORD_DIR": str(record),
        "TURN_TEMPLATE": str(TEMPLATE),
        "TURN_CONF_DIR": str(tmp_path / "run"),
    } | environment
    return subprocess.run(
        ["/bin/sh", str(SCRIPT), "--extra"], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def test_script_appends_the_per_deployment_lines_to_the_template(tmp_path: Path) -> None:
    result = run_script(
        tmp_path,
        TURN_SECRET="s3cret/with+odd=chars",
        TURN_REALM="livefuse.example.com",
        TURN_ALLOWED_PEER_IP="10.244.0.0-10.244.255.255",
        TURN_EXTERNAL_IP="203.0.113.7",
        NODE_IP="10.0.0.5",
    )
    assert result.returncode == 0, result.stderr
    rendered = (tmp_path / "record" / "conf").read_text(encoding="utf-8")
    template = TEMPLATE.read_text(encoding="utf-8")
    assert rendered.startswith(template)
    assert turnserver_options(rendered[len(template) :]) == {
        "realm": ["livefuse.example.com"],
        "static-auth-secret": ["s3cret/with+odd=chars"],
        "allowed-peer-ip": ["10.244.0.0-10.244.255.255"],
        "external-ip": ["203.0.113.7/10.0.0.5"],
    }
    args = (tmp_path / "record" / "args").read_text(encoding="utf-8").split()
    assert args == ["-c", str(tmp_path / "run" / "turnserver.conf"), "--extra"]
    mode = stat.S_IMODE((tmp_path / "run" / "turnserver.conf").stat().st_mode)
    assert mode & 0o077 == 0, "the rendered file holds the secret: owner only"


def test_script_leaves_out_optional_lines_when_unset(tmp_path: Path) -> None:
    result = run_script(
        tmp_path, TURN_SECRET="x" * 16, TURN_REALM="r", TURN_ALLOWED_PEER_IP="", TURN_EXTERNAL_IP=""
    )
    assert result.returncode == 0, result.stderr
    options = turnserver_options((tmp_path / "record" / "conf").read_text(encoding="utf-8"))
    assert "allowed-peer-ip" not in options and "external-ip" not in options


def test_script_refuses_to_start_without_a_secret(tmp_path: Path) -> None:
    result = run_script(tmp_path, TURN_REALM="r")
    assert result.returncode != 0
    assert "TURN_SECRET" in result.stderr
    assert not (tmp_path / "record" / "args").exists()


def test_template_denies_private_peers_and_keeps_credentials_out() -> None:
    options = turnserver_options(TEMPLATE.read_text(encoding="utf-8"))
    assert "use-auth-secret" in options
    for forbidden in ("static-auth-secret", "user", "lt-cred-mech", "allow-loopback-peers", "cli-password"):
        assert forbidden not in options, forbidden
    denied = set(options["denied-peer-ip"])
    assert {"10.0.0.0-10.255.255.255", "172.16.0.0-172.31.255.255", "192.168.0.0-192.168.255.255"} <= denied
    assert int(options["min-port"][0]) < int(options["max-port"][0])


# --- the real coturn ---------------------------------------------------------------------------------


def attribute(kind: int, value: bytes) -> bytes:
    return struct.pack("!HH", kind, len(value)) + value + b"\0" * (-len(value) % 4)


def message(kind: int, transaction: bytes, attributes: bytes, key: bytes | None = None) -> bytes:
    if key is not None:  # MESSAGE-INTEGRITY covers the header with the length including itself
        header = struct.pack("!HHI", kind, len(attributes) + 24, MAGIC_COOKIE) + transaction
        digest = hmac.new(key, header + attributes, hashlib.sha1).digest()
        attributes += attribute(MESSAGE_INTEGRITY, digest)
    return struct.pack("!HHI", kind, len(attributes), MAGIC_COOKIE) + transaction + attributes


def parse(data: bytes) -> tuple[int, dict[int, bytes]]:
    kind, length, cookie = struct.unpack("!HHI", data[:8])
    assert cookie == MAGIC_COOKIE
    attributes: dict[int, bytes] = {}
    offset = 20
    while offset < 20 + length:
        attribute_kind, attribute_length = struct.unpack("!HH", data[offset : offset + 4])
        attributes[attribute_kind] = data[offset + 4 : offset + 4 + attribute_length]
        offset += 4 + attribute_length + (-attribute_length % 4)
    return kind, attributes


def turn_rest_credentials(secret: str, ttl_s: int = 600) -> tuple[str, str]:
    """The TURN REST scheme coturn's use-auth-secret checks: username expiry:id, password base64(HMAC-SHA1)."""
    username = f"{int(time.time()) + ttl_s}:livefuse-test"
    password = base64.b64encode(hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()).decode()
    return username, password


def allocate(port: int, realm: str, username: str, password: str) -> tuple[int, dict[int, bytes]]:
    transport = attribute(REQUESTED_TRANSPORT, bytes([UDP_TRANSPORT, 0, 0, 0]))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
        client.settimeout(5)
        client.sendto(message(ALLOCATE, os.urandom(12), transport), ("127.0.0.1", port))
        kind, challenge = parse(client.recv(2048))
        assert kind == ALLOCATE_ERROR and challenge[ERROR_CODE][2:4] == bytes([4, 1]), "expected 401"
        assert challenge[REALM].decode() == realm
        key = hashlib.md5(f"{username}:{realm}:{password}".encode()).digest()  # RFC 8489 long-term key
        attributes = (
            attribute(USERNAME, username.encode())
            + attribute(REALM, realm.encode())
            + attribute(NONCE, challenge[NONCE])
            + transport
        )
        client.sendto(message(ALLOCATE, os.urandom(12), attributes, key), ("127.0.0.1", port))
        return parse(client.recv(2048))


@pytest.fixture
def coturn(tmp_path: Path) -> Iterator[tuple[int, str, str]]:
    with running_coturn(tmp_path) as server:
        yield server.port, server.secret, server.realm


def test_coturn_allocates_a_relay_in_the_configured_range_for_rest_credentials(
    coturn: tuple[int, str, str],
) -> None:
    port, secret, realm = coturn
    kind, attributes = allocate(port, realm, *turn_rest_credentials(secret))
    assert kind == ALLOCATE_SUCCESS, attributes.get(ERROR_CODE)
    relayed_port = struct.unpack("!H", attributes[XOR_RELAYED_ADDRESS][2:4])[0] ^ (MAGIC_COOKIE >> 16)
    options = turnserver_options(TEMPLATE.read_text(encoding="utf-8"))
    assert int(options["min-port"][0]) <= relayed_port <= int(options["max-port"][0])


def test_coturn_accepts_the_credentials_the_daemon_makes(coturn: tuple[int, str, str]) -> None:
    """The daemon's --turn-secret credentials (streamer/transport/ice_servers.py), not only this file's."""
    port, secret, realm = coturn
    credential = turn_rest_credential(secret, "0123456789abcdef-client", 600, time.time())
    kind, attributes = allocate(port, realm, credential.username, credential.password)
    assert kind == ALLOCATE_SUCCESS, attributes.get(ERROR_CODE)


def test_coturn_refuses_credentials_made_from_another_secret(coturn: tuple[int, str, str]) -> None:
    port, _, realm = coturn
    kind, attributes = allocate(port, realm, *turn_rest_credentials("not-the-shared-secret"))
    assert kind == ALLOCATE_ERROR
    assert attributes[ERROR_CODE][2:4] == bytes([4, 1])
