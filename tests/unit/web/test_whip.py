"""WHIP/WHEP body parsing: offers, trickle fragments, and the OBS-like offer stripping."""

import pytest

from bench.clients.whip_client import strip_candidates
from web.whip import WhipState, parse_sdp_offer, parse_trickle_fragment

OFFER = (
    "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n"
    "m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=sendonly\r\n"
    "a=rtpmap:96 H264/90000\r\na=ice-ufrag:abcd\r\na=ice-pwd:0123456789abcdef012345\r\n"
    "a=fingerprint:sha-256 00:11\r\na=setup:actpass\r\n"
    "a=candidate:1 1 udp 2130706431 127.0.0.1 40000 typ host\r\na=end-of-candidates\r\n"
)


def test_offer_accepted_and_refused() -> None:
    assert parse_sdp_offer(OFFER).type == "offer"
    for body in ("", "hello", "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n", "v=0\r\nm=video x\r\n"):
        with pytest.raises(ValueError):
            parse_sdp_offer(body)


def test_trickle_fragment() -> None:
    fragment = (
        "a=ice-ufrag:abcd\r\na=ice-pwd:xyz\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\n"
        "a=candidate:1 1 udp 2130706431 127.0.0.1 40000 typ host\r\n"
        "a=candidate:2 1 udp 1694498815 192.0.2.1 40001 typ srflx raddr 0.0.0.0 rport 0\r\n"
        "a=end-of-candidates\r\n"
    )
    first, second, end = parse_trickle_fragment(fragment)
    assert first is not None and (first.ip, first.port, first.type) == ("127.0.0.1", 40000, "host")
    assert second is not None and second.type == "srflx"
    assert first.sdpMLineIndex == 0 and second.sdpMLineIndex == 0  # bundled on the first transport
    assert end is None
    assert parse_trickle_fragment("a=ice-ufrag:abcd\r\n") == []
    with pytest.raises(ValueError):
        parse_trickle_fragment("a=candidate:1 1 udp\r\n")


def test_obs_like_offer_has_no_candidates() -> None:
    stripped = strip_candidates(OFFER)
    assert "a=candidate" not in stripped and "end-of-candidates" not in stripped
    assert "a=ice-ufrag:abcd" in stripped and parse_sdp_offer(stripped).sdp == stripped


class _Registry:
    def __init__(self, open_ids: set[str]) -> None:
        self.open_ids = open_ids

    def get(self, session_id: str) -> object | None:
        return object() if session_id in self.open_ids else None


def test_whip_ids_forget_ended_sessions() -> None:
    state = WhipState()
    registry = _Registry({"a", "b"})
    for session_id in ("a", "b"):
        state.remember(session_id, registry)  # type: ignore[arg-type]
    registry.open_ids = {"b", "c"}  # "a" ended
    state.remember("c", registry)  # type: ignore[arg-type]
    assert state.session_ids == ["b", "c"]
