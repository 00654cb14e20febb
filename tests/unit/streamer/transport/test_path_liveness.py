"""Telling a network gap from a gone peer on an injected clock: silence with ICE up is a gap, a peer we
still hear is talking, ICE failure, a refusal after the last datagram or an expired consent is gone."""

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from streamer.transport import path_liveness
from streamer.transport.path_liveness import (
    CONSENT_LIFETIME_S,
    PATH_SILENT_S,
    QUIET_S,
    gap_ended_s_ago,
    path_state,
)


@dataclass
class FakePeer:
    """What path_state reads of an RTCPeerConnection: its states and its ICE connection's chosen pair."""

    protocol: Any = field(default_factory=SimpleNamespace)
    connectionState: str = "connected"
    iceConnectionState: str = "completed"
    sctp: None = None

    def getTransceivers(self) -> list[Any]:
        connection = SimpleNamespace(_nominated={1: SimpleNamespace(protocol=self.protocol)})
        dtls = SimpleNamespace(transport=SimpleNamespace(_connection=connection))
        return [SimpleNamespace(receiver=SimpleNamespace(transport=dtls))]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(path_liveness.time, "monotonic", lambda: now[0])
    return now


def _hear(peer: FakePeer) -> None:
    path_liveness._datagram_received(peer.protocol, b"x", ("127.0.0.1", 9))


def test_a_peer_heard_recently_is_talking_and_a_silent_path_is_a_gap(
    clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(path_liveness, "_ORIGINAL_DATAGRAM_RECEIVED", lambda protocol, data, addr: None)
    peer = FakePeer()
    _hear(peer)
    assert path_state(peer) == "talking"  # type: ignore[arg-type]
    clock[0] += QUIET_S + 0.1
    assert path_state(peer) == "quiet"  # type: ignore[arg-type]  # too short to tell yet
    clock[0] += PATH_SILENT_S
    assert path_state(peer) == "gap"  # type: ignore[arg-type]
    assert gap_ended_s_ago(peer) is None  # type: ignore[arg-type]
    _hear(peer)  # the path is back
    clock[0] += 1.0
    assert path_state(peer) == "talking"  # type: ignore[arg-type]
    assert gap_ended_s_ago(peer) == pytest.approx(1.0)  # type: ignore[arg-type]


def test_gone_peers(clock: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(path_liveness, "_ORIGINAL_DATAGRAM_RECEIVED", lambda protocol, data, addr: None)
    monkeypatch.setattr(path_liveness, "_ORIGINAL_ERROR_RECEIVED", lambda protocol, exc: None)
    refused = FakePeer()
    _hear(refused)
    clock[0] += 0.5
    path_liveness._error_received(refused.protocol, ConnectionRefusedError(111, "refused"))
    assert path_state(refused) == "gone"  # type: ignore[arg-type]  # the host says nobody listens

    expired = FakePeer()
    _hear(expired)
    clock[0] += CONSENT_LIFETIME_S + 1
    assert path_state(expired) == "gone"  # type: ignore[arg-type]

    failed = FakePeer(connectionState="failed")
    assert path_state(failed) == "gone"  # type: ignore[arg-type]
    assert path_state(None) == "gone"
