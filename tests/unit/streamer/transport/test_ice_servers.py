import base64
import hashlib
import hmac

import pytest

from gpu_ops.errors import InvalidInputError
from streamer.transport.ice_servers import (
    ClientIceServer,
    IceServerPlan,
    parse_ice_server_url,
    parse_ice_server_urls,
    turn_rest_credential,
)

SECRET = "a-shared-secret-of-some-length"
NOW = 1_800_000_000.0


def plan(text: str, secret: str | None = SECRET, ttl_s: int = 3600) -> IceServerPlan:
    return IceServerPlan(parse_ice_server_urls(text), secret, ttl_s, clock=lambda: NOW)


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port", "transport"),
    [
        ("stun:stun.example.net", "stun", "stun.example.net", 3478, None),
        ("stun:192.0.2.7:19302", "stun", "192.0.2.7", 19302, None),
        ("turn:turn.example.net?transport=udp", "turn", "turn.example.net", 3478, "udp"),
        ("turn:turn.example.net:443?transport=tcp", "turn", "turn.example.net", 443, "tcp"),
        ("turns:turn.example.net", "turns", "turn.example.net", 5349, None),
        ("turn:[2001:db8::1]:3478", "turn", "[2001:db8::1]", 3478, None),
    ],
)
def test_urls_of_rfc_7064_and_7065_are_taken_as_given(
    url: str, scheme: str, host: str, port: int, transport: str | None
) -> None:
    parsed = parse_ice_server_url(url)
    assert (parsed.url, parsed.scheme, parsed.host, parsed.port, parsed.transport) == (
        url,
        scheme,
        host,
        port,
        transport,
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://turn.example.net", "not a STUN/TURN URL"),
        ("stuns:stun.example.net", "browsers do not support stuns"),
        ("turn:", "not a STUN/TURN URL"),
        ("stun:stun.example.net?transport=udp", "take no ?transport="),
        ("turns:turn.example.net?transport=udp", "transport must be tcp"),
        ("turn:turn.example.net?transport=sctp", "transport must be udp or tcp"),
        ("turn:turn.example.net:0", "not in 1-65535"),
        ("turn:turn.example.net:70000", "not in 1-65535"),
        ("turn:-bad-.example", "not a host name"),
        ("turn:[not:v6]", "not a STUN/TURN URL"),
        ("turn:[12345::]", "is not an IPv6 address"),
        ("turn:user:pass@turn.example.net", "not a STUN/TURN URL"),
    ],
)
def test_malformed_urls_are_refused_with_the_fix(url: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match="--ice-servers") as error:
        parse_ice_server_url(url)
    assert says in str(error.value)


def test_a_list_is_comma_separated_and_blanks_are_ignored() -> None:
    urls = parse_ice_server_urls(" stun:a.example , turn:b.example?transport=tcp,, ")
    assert [url.url for url in urls] == ["stun:a.example", "turn:b.example?transport=tcp"]
    assert parse_ice_server_urls("") == ()


def test_credentials_are_coturns_turn_rest_scheme() -> None:
    credential = turn_rest_credential(SECRET, "call-1", 600, NOW)
    assert credential.username == f"{int(NOW) + 600}:call-1"
    expected = hmac.new(SECRET.encode(), credential.username.encode(), hashlib.sha1).digest()
    assert base64.b64decode(credential.password) == expected
    assert credential.expires_at == int(NOW) + 600
    with pytest.raises(ValueError, match="client id"):
        turn_rest_credential(SECRET, 'quote"breaks:headers', 600, NOW)


@pytest.mark.parametrize(
    ("text", "secret", "ttl_s", "says"),
    [
        ("turn:t.example", None, 3600, "no --turn-secret"),
        ("stun:s.example", SECRET, 3600, "no turn:/turns: URL"),
        ("turn:t.example", "short", 3600, "at least 16 characters"),
        ("turn:t.example", SECRET, 10, "--turn-ttl must be"),
        ("turn:t.example", SECRET, 30 * 24 * 3600, "--turn-ttl must be"),
    ],
)
def test_inconsistent_settings_are_refused(text: str, secret: str | None, ttl_s: int, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        plan(text, secret, ttl_s)


def test_clients_get_every_url_and_one_fresh_credential_for_the_turn_ones() -> None:
    servers = plan("stun:s.example,turn:t.example?transport=udp,turns:t.example").client_servers("web-1")
    stun, turn = servers
    assert stun == ClientIceServer(("stun:s.example",))
    assert turn.urls == ("turn:t.example?transport=udp", "turns:t.example")
    assert turn.username == f"{int(NOW) + 3600}:web-1"
    assert turn.as_json() == {
        "urls": list(turn.urls),
        "username": turn.username,
        "credential": turn.credential,
    }
    assert stun.as_json() == {"urls": ["stun:s.example"]}
    assert plan("", None).client_servers("x") == ()


def test_the_daemon_uses_the_first_stun_and_the_first_turn_url_aiortc_can_parse() -> None:
    configured = plan("turn:[2001:db8::1],stun:a.example,stun:b.example,turn:t.example?transport=tcp")
    assert [url.url for url in configured.daemon_urls] == ["stun:a.example", "turn:t.example?transport=tcp"]
    servers = configured.rtc_configuration("0123abcd").iceServers
    assert servers is not None
    assert [(server.urls, server.username) for server in servers] == [
        ("stun:a.example", None),
        ("turn:t.example?transport=tcp", f"{int(NOW) + 3600}:0123abcd"),
    ]
    assert servers[1].credential == turn_rest_credential(SECRET, "0123abcd", 3600, NOW).password


def test_without_servers_the_daemon_gets_an_empty_list_not_aiortcs_default_stun() -> None:
    assert IceServerPlan().rtc_configuration("x").iceServers == []


def test_the_secret_and_passwords_never_show_in_a_repr_or_the_description() -> None:
    configured = plan("turn:t.example")
    credential = configured.credential("x")
    assert credential is not None
    (turn,) = configured.client_servers("x")
    for text in (repr(configured), configured.describe(), repr(credential), repr(turn)):
        assert SECRET not in text and credential.password not in text
    assert "turn:t.example" in configured.describe()
