"""The network settings of `serve` for NAT traversal and for several daemons behind a proxy, read from
their flags (run_stream.py defines them) or, when a flag is absent, from their LIVEFUSE_* variable
(docs/deploy.md), and checked before the server starts: a malformed value is an InvalidInputError (exit
code 2) naming the fix.

| flag | variable |
|---|---|
| `--ice-servers URLS` | LIVEFUSE_ICE_SERVERS |
| `--turn-secret SECRET` | LIVEFUSE_TURN_SECRET (prefer it: a flag shows in `ps`) |
| `--turn-ttl SECONDS` | LIVEFUSE_TURN_TTL |
| `--ice-port-range MIN-MAX` | LIVEFUSE_ICE_PORT_RANGE |
| `--public-address IP` | LIVEFUSE_PUBLIC_ADDRESS |
| `--public-url URL` | LIVEFUSE_PUBLIC_URL |
| `--trusted-proxies CIDR[,CIDR]` | LIVEFUSE_TRUSTED_PROXIES |
"""

import argparse
import logging
import os
import urllib.parse

from gpu_ops.errors import InvalidInputError
from streamer.transport.ice_host_candidates import PortRange, check_public_address
from streamer.transport.ice_servers import DEFAULT_TURN_TTL_S, IceServerPlan, parse_ice_server_urls
from web.client_address import TrustedProxies, parse_trusted_proxies

logger = logging.getLogger(__name__)

ICE_SERVERS_ENV = "LIVEFUSE_ICE_SERVERS"
TURN_SECRET_ENV = "LIVEFUSE_TURN_SECRET"
TURN_TTL_ENV = "LIVEFUSE_TURN_TTL"
ICE_PORT_RANGE_ENV = "LIVEFUSE_ICE_PORT_RANGE"
PUBLIC_ADDRESS_ENV = "LIVEFUSE_PUBLIC_ADDRESS"
PUBLIC_URL_ENV = "LIVEFUSE_PUBLIC_URL"
TRUSTED_PROXIES_ENV = "LIVEFUSE_TRUSTED_PROXIES"


def _setting(args: argparse.Namespace, name: str, variable: str) -> str | None:
    """The flag's value, else the variable's; blank counts as unset (Compose passes `${X:-}` as "")."""
    value = getattr(args, name, None)
    if value is None:
        value = os.environ.get(variable)
    return value.strip() or None if value is not None else None


def check_public_url(text: str) -> str:
    """`--public-url`: an absolute http(s) URL, optionally with a path prefix; one trailing / dropped."""
    parts = urllib.parse.urlsplit(text)
    valid = (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and not parts.query
        and not parts.fragment
        and parts.username is None
        and " " not in text
    )
    try:
        valid = valid and (parts.port is None or parts.port > 0)
    except ValueError:
        valid = False
    if not valid:
        raise InvalidInputError(
            f"--public-url {text!r}: give this daemon's external base URL, e.g. https://livefuse-0.example.com"
        )
    return text.removesuffix("/")


def _turn_ttl(args: argparse.Namespace) -> int:
    text = _setting(args, "turn_ttl", TURN_TTL_ENV)
    if text is None:
        return DEFAULT_TURN_TTL_S
    try:
        return int(text)
    except ValueError:
        raise InvalidInputError(f"--turn-ttl {text!r}: give whole seconds, e.g. 3600") from None


def read_ice_servers(args: argparse.Namespace) -> IceServerPlan:
    """DaemonConfig.ice: --ice-servers, --turn-secret and --turn-ttl (or their variables)."""
    urls = parse_ice_server_urls(_setting(args, "ice_servers", ICE_SERVERS_ENV) or "")
    return IceServerPlan(urls, _setting(args, "turn_secret", TURN_SECRET_ENV), _turn_ttl(args))


def read_ice_port_range(args: argparse.Namespace) -> PortRange | None:
    """DaemonConfig.ice_port_range; warns when it has fewer ports than --max-sessions needs."""
    text = _setting(args, "ice_port_range", ICE_PORT_RANGE_ENV)
    if text is None:
        return None
    port_range = PortRange.parse(text)
    max_sessions = getattr(args, "max_sessions", None)
    if max_sessions is not None and len(port_range) < max_sessions:
        logger.warning(
            "--ice-port-range %s has %d ports for --max-sessions %d: each call (and each WHEP viewer) "
            "takes one port per host address",
            port_range,
            len(port_range),
            max_sessions,
        )
    return port_range


def read_public_address(args: argparse.Namespace) -> str | None:
    text = _setting(args, "public_address", PUBLIC_ADDRESS_ENV)
    return check_public_address(text) if text is not None else None


def read_public_url(args: argparse.Namespace) -> str | None:
    text = _setting(args, "public_url", PUBLIC_URL_ENV)
    return check_public_url(text) if text is not None else None


def read_trusted_proxies(args: argparse.Namespace) -> TrustedProxies | None:
    """DaemonConfig.trusted_proxies: whose X-Forwarded-For / Forwarded headers name the client."""
    text = _setting(args, "trusted_proxies", TRUSTED_PROXIES_ENV)
    return TrustedProxies(parse_trusted_proxies(text)) if text is not None else None
