"""The client's address behind trusted proxies: headers from untrusted peers ignored, chains read right
to left, IPv6 and RFC 7239 forms, and the rate limiter and audit log keyed on the client it finds."""

import argparse
import ipaddress
import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from multidict import CIMultiDict

from gpu_ops.errors import InvalidInputError
from web.auth import access_middlewares
from web.client_address import (
    TrustedProxies,
    client_address,
    client_address_middleware,
    forwarded_chain,
    parse_node,
    parse_trusted_proxies,
)
from web.daemon_config import DaemonConfig
from web.limits import json_errors, request_limits
from web.network_config import read_trusted_proxies

PROXIES = TrustedProxies(parse_trusted_proxies("10.0.0.0/8, fd00::/8, 127.0.0.1"))


def test_cidrs_and_bare_addresses_parse_and_garbage_is_refused() -> None:
    assert parse_trusted_proxies("10.0.0.0/8,2001:db8::/32, 192.0.2.7") == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("2001:db8::/32"),
        ipaddress.ip_network("192.0.2.7/32"),
    )
    with pytest.raises(InvalidInputError, match="trusted-proxies"):
        parse_trusted_proxies("10.0.0.0/8,haproxy")


def test_the_flag_wins_over_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIVEFUSE_TRUSTED_PROXIES", "10.0.0.0/8")
    from_variable = read_trusted_proxies(argparse.Namespace(trusted_proxies=None))
    from_flag = read_trusted_proxies(argparse.Namespace(trusted_proxies="192.0.2.0/24"))
    assert from_variable == TrustedProxies((ipaddress.ip_network("10.0.0.0/8"),))
    assert from_flag == TrustedProxies((ipaddress.ip_network("192.0.2.0/24"),))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("192.0.2.1:4711", "192.0.2.1"),
        ("2001:db8::1", "2001:db8::1"),
        ("[2001:db8::1]:4711", "2001:db8::1"),
        ('"[2001:db8::1]"', "2001:db8::1"),
        ("::ffff:192.0.2.1", "192.0.2.1"),
        ("fe80::1%eth0", "fe80::1"),
        ("unknown", None),
        ("_hidden", None),
        ("[2001:db8::1", None),
        ("300.1.1.1", None),
    ],
)
def test_one_hop_parses_to_an_address_or_none(text: str, expected: str | None) -> None:
    address = parse_node(text)
    assert (str(address) if address is not None else None) == expected


def test_headers_from_an_untrusted_peer_are_ignored() -> None:
    assert PROXIES.client_of("203.0.113.9", ["198.51.100.1"]) == "203.0.113.9"
    assert TrustedProxies().client_of("10.0.0.2", ["198.51.100.1"]) == "10.0.0.2"  # none trusted


def test_the_right_most_untrusted_hop_is_the_client() -> None:
    # the client put a spoofed address first; our two proxies appended what they saw
    chain = ["1.2.3.4", "198.51.100.7", "10.1.2.3"]
    assert PROXIES.client_of("10.0.0.2", chain) == "198.51.100.7"
    assert PROXIES.client_of("10.0.0.2", ["198.51.100.7"]) == "198.51.100.7"


def test_a_trusted_peer_without_headers_or_only_trusted_hops_is_the_last_address_known() -> None:
    assert PROXIES.client_of("10.0.0.2", []) == "10.0.0.2"
    assert PROXIES.client_of("10.0.0.2", ["10.9.9.9", "10.1.1.1"]) == "10.9.9.9"


def test_a_broken_link_stops_the_walk_at_the_trusted_hop_before_it() -> None:
    assert PROXIES.client_of("10.0.0.2", ["198.51.100.7", "garbage", "10.1.1.1"]) == "10.1.1.1"
    assert PROXIES.client_of("10.0.0.2", ["unknown"]) == "10.0.0.2"


def test_ipv6_peers_and_clients() -> None:
    assert PROXIES.client_of("fd00::5", ["2001:db8::7", "fd00::9"]) == "2001:db8::7"
    assert PROXIES.client_of("2001:db8::5", ["198.51.100.7"]) == "2001:db8::5"  # not trusted
    assert PROXIES.client_of("::ffff:10.0.0.2", ["198.51.100.7"]) == "198.51.100.7"  # dual-stack socket


def test_x_forwarded_for_wins_over_forwarded_and_several_headers_join() -> None:
    """The shipped proxies write X-Forwarded-For and would pass a client's own Forwarded through."""
    headers = CIMultiDict([("X-Forwarded-For", "198.51.100.1, 10.0.0.3"), ("X-Forwarded-For", "10.0.0.4")])
    forwarded = [{"for": "192.0.2.60", "proto": "http"}, {"for": "[2001:db8:cafe::17]:4711"}]
    assert forwarded_chain(headers, forwarded) == ["198.51.100.1", "10.0.0.3", "10.0.0.4"]
    assert forwarded_chain({}, forwarded) == ["192.0.2.60", "[2001:db8:cafe::17]:4711"]
    assert forwarded_chain({}, [{"proto": "https"}]) == []


async def _created(request: web.Request) -> web.Response:
    return web.json_response(
        {"remote": client_address(request)}, status=201, headers={"Location": "/api/sessions/abc"}
    )


def _app(config: DaemonConfig) -> web.Application:
    middlewares = [
        client_address_middleware(config.trusted_proxies),
        *access_middlewares(config),
        json_errors,
        request_limits(config),
    ]
    app = web.Application(middlewares=middlewares)
    app.router.add_post("/api/sessions", _created)
    return app


@pytest.fixture
async def behind_proxy() -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    """The test client connects from 127.0.0.1: here that is the trusted proxy."""
    trusted = TrustedProxies(parse_trusted_proxies("127.0.0.0/8"))
    config = DaemonConfig(rate_limit_per_minute=6, trusted_proxies=trusted)
    async with TestClient(TestServer(_app(config))) as test_client:
        yield test_client


async def _create(client: TestClient, headers: dict[str, str]) -> tuple[int, str | None]:  # type: ignore[type-arg]
    async with client.post("/api/sessions", json={}, headers=headers) as response:
        body = await response.json()
        return response.status, body.get("remote")


async def test_each_client_behind_the_proxy_gets_its_own_bucket(behind_proxy: TestClient) -> None:  # type: ignore[type-arg]
    first = {"X-Forwarded-For": "198.51.100.1"}
    assert await _create(behind_proxy, first) == (201, "198.51.100.1")
    assert (await _create(behind_proxy, first))[0] == 429  # 6 a minute: a burst of one, spent
    second = {"Forwarded": 'for="[2001:db8::2]:5000"'}
    assert await _create(behind_proxy, second) == (201, "2001:db8::2")


async def test_the_audit_line_names_the_client_not_the_proxy(
    behind_proxy: TestClient,  # type: ignore[type-arg]
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="streamer.outputs.provenance"):
        await _create(behind_proxy, {"X-Forwarded-For": "1.2.3.4, 198.51.100.9"})
    (entry,) = [record for record in caplog.records if getattr(record, "event", None) == "audit"]
    assert entry.remote == "198.51.100.9"  # type: ignore[attr-defined]


async def test_spoofed_headers_from_an_untrusted_peer_share_its_bucket() -> None:
    trusted = TrustedProxies(parse_trusted_proxies("10.0.0.0/8"))  # not the test client's 127.0.0.1
    config = DaemonConfig(rate_limit_per_minute=6, trusted_proxies=trusted)
    async with TestClient(TestServer(_app(config))) as client:
        results = [await _create(client, {"X-Forwarded-For": f"198.51.100.{n}"}) for n in range(2)]
    assert results[0] == (201, "127.0.0.1")
    assert results[1][0] == 429  # a new spoofed address each time, the same bucket
