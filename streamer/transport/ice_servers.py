"""STUN/TURN servers for both ends of a call (`serve --ice-servers`, `--turn-secret`, `--turn-ttl`): the
URLs checked once at start, short-lived TURN credentials made per client from coturn's shared secret, the
RTCConfiguration of the daemon's own peer connections, and the list handed to clients (web/ turns it into
the page's JSON and RFC 9725 `Link: rel="ice-server"` headers).

Credentials follow the TURN REST scheme that coturn's `use-auth-secret` checks: username
"<unix expiry>:<id>", password base64(HMAC-SHA1(secret, username)). No user list is kept anywhere; coturn
checks the expiry when an allocation is made, so a call outlives its credential, and each client gets a
fresh one when it starts a call. The secret and the passwords never reach a log line or a repr.

aiortc uses one STUN and one TURN server per peer connection (the first of each it can use), so the
daemon itself uses the first usable `stun:` and `turn:`/`turns:` URL; clients get every URL.
"""

import base64
import hashlib
import hmac
import ipaddress
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiortc import RTCConfiguration, RTCIceServer

from gpu_ops.errors import InvalidInputError

logger = logging.getLogger(__name__)

Scheme = Literal["stun", "turn", "turns"]
DEFAULT_TURN_TTL_S = 3600
MIN_TURN_TTL_S = 60
MAX_TURN_TTL_S = 7 * 24 * 3600
MIN_SECRET_CHARS = 16
CLIENT_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # safe in a STUN USERNAME and in a quoted header value
# RFC 7064 (stun) and RFC 7065 (turn, turns): scheme ":" host [":" port] ["?transport=" udp|tcp]
ICE_URL = re.compile(
    r"^(?P<scheme>[a-z]+):(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?"
    r"(?:\?transport=(?P<transport>[a-z]+))?$"
)
HOST_NAME = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?$")
URL_FORM = "stun:HOST[:PORT], turn:HOST[:PORT][?transport=udp|tcp] or turns:HOST[:PORT][?transport=tcp]"


@dataclass(frozen=True)
class IceServerUrl:
    """One checked STUN/TURN URL, kept as given (clients get the text)."""

    url: str
    scheme: Scheme
    host: str
    port: int
    transport: Literal["udp", "tcp"] | None = None

    @property
    def is_turn(self) -> bool:
        return self.scheme != "stun"

    @property
    def usable_by_aiortc(self) -> bool:
        """aiortc's own URL pattern takes no bracketed IPv6 host: such a URL is for clients only."""
        return not self.host.startswith("[")


def parse_ice_server_url(text: str) -> IceServerUrl:
    """One URL checked against RFC 7064/7065; InvalidInputError naming the fix."""
    match = ICE_URL.fullmatch(text)
    if match is None:
        raise InvalidInputError(f"--ice-servers: {text!r} is not a STUN/TURN URL; use {URL_FORM}")
    scheme, host, transport = match["scheme"], match["host"], match["transport"]
    if scheme not in ("stun", "turn", "turns"):
        refused = " (browsers do not support stuns:)" if scheme == "stuns" else ""
        raise InvalidInputError(f"--ice-servers: {text!r} has scheme {scheme}:{refused}; use {URL_FORM}")
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise InvalidInputError(f"--ice-servers: {text!r}: {host} is not an IPv6 address") from None
    elif not HOST_NAME.match(host):
        raise InvalidInputError(f"--ice-servers: {text!r}: {host!r} is not a host name or IPv4 address")
    port = int(match["port"]) if match["port"] else (5349 if scheme == "turns" else 3478)
    if not 1 <= port <= 65535:
        raise InvalidInputError(f"--ice-servers: {text!r}: port {port} is not in 1-65535")
    if transport is not None and scheme == "stun":
        raise InvalidInputError(f"--ice-servers: {text!r}: stun: URLs take no ?transport= (RFC 7064)")
    if transport not in (None, "udp", "tcp") or (scheme == "turns" and transport == "udp"):
        allowed = "tcp" if scheme == "turns" else "udp or tcp"
        raise InvalidInputError(f"--ice-servers: {text!r}: transport must be {allowed}")
    return IceServerUrl(text, scheme, host, port, transport)  # type: ignore[arg-type]


def parse_ice_server_urls(text: str) -> tuple[IceServerUrl, ...]:
    """A comma-separated list (blanks around commas ignored); empty text gives no servers."""
    return tuple(parse_ice_server_url(part.strip()) for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class TurnCredential:
    """A TURN REST credential: valid until `expires_at` (unix seconds) for coturn's use-auth-secret."""

    username: str
    password: str = field(repr=False)
    expires_at: int


def turn_rest_credential(secret: str, client_id: str, ttl_s: int, now: float) -> TurnCredential:
    """username "<unix expiry>:<client id>", password base64(HMAC-SHA1(secret, username))."""
    if not CLIENT_ID.match(client_id):
        raise ValueError(f"a TURN client id is 1-64 of [A-Za-z0-9_.-], got {client_id!r}")
    expires_at = int(now) + ttl_s
    username = f"{expires_at}:{client_id}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return TurnCredential(username, base64.b64encode(digest).decode("ascii"), expires_at)


@dataclass(frozen=True)
class ClientIceServer:
    """One entry of a client's `iceServers` (the W3C RTCIceServer dictionary)."""

    urls: tuple[str, ...]
    username: str | None = None
    credential: str | None = field(default=None, repr=False)

    def as_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"urls": list(self.urls)}
        if self.username is not None:
            entry |= {"username": self.username, "credential": self.credential}
        return entry


@dataclass(frozen=True)
class IceServerPlan:
    """The STUN/TURN servers of one daemon and how their credentials are made.

    :param urls: checked URLs (`parse_ice_server_urls`); empty: host candidates only, as before.
    :param turn_secret: coturn's `static-auth-secret`; required when a URL is turn:/turns:.
    :param turn_ttl_s: how long each credential handed out stays valid for new allocations.
    """

    urls: tuple[IceServerUrl, ...] = ()
    turn_secret: str | None = field(default=None, repr=False)
    turn_ttl_s: int = DEFAULT_TURN_TTL_S
    clock: Callable[[], float] = field(default=time.time, repr=False, compare=False)

    def __post_init__(self) -> None:
        has_turn = any(url.is_turn for url in self.urls)
        if has_turn and not self.turn_secret:
            raise InvalidInputError(
                "--ice-servers has turn: URLs but no --turn-secret: give coturn's static-auth-secret "
                "(--turn-secret or $LIVEFUSE_TURN_SECRET)"
            )
        if self.turn_secret and not has_turn:
            raise InvalidInputError(
                "--turn-secret is set but --ice-servers has no turn:/turns: URL to use it with"
            )
        if self.turn_secret is not None and len(self.turn_secret) < MIN_SECRET_CHARS:
            raise InvalidInputError(f"--turn-secret must be at least {MIN_SECRET_CHARS} characters")
        if not MIN_TURN_TTL_S <= self.turn_ttl_s <= MAX_TURN_TTL_S:
            raise InvalidInputError(
                f"--turn-ttl must be {MIN_TURN_TTL_S}-{MAX_TURN_TTL_S} seconds, got {self.turn_ttl_s}"
            )

    @property
    def daemon_urls(self) -> tuple[IceServerUrl, ...]:
        """The URLs the daemon's own peer connections use: the first usable STUN and TURN URL."""
        chosen: dict[bool, IceServerUrl] = {}
        for url in self.urls:
            if url.usable_by_aiortc:
                chosen.setdefault(url.is_turn, url)
        return tuple(chosen[kind] for kind in (False, True) if kind in chosen)

    def credential(self, client_id: str) -> TurnCredential | None:
        """A fresh TURN credential for `client_id`, or None without TURN."""
        if self.turn_secret is None:
            return None
        return turn_rest_credential(self.turn_secret, client_id, self.turn_ttl_s, self.clock())

    def client_servers(self, client_id: str) -> tuple[ClientIceServer, ...]:
        """What a client puts in its RTCConfiguration: STUN URLs, then TURN URLs with one credential."""
        stun = tuple(url.url for url in self.urls if not url.is_turn)
        turn = tuple(url.url for url in self.urls if url.is_turn)
        servers = [ClientIceServer(stun)] if stun else []
        credential = self.credential(client_id) if turn else None
        if credential is not None:
            servers.append(ClientIceServer(turn, credential.username, credential.password))
        return tuple(servers)

    def rtc_configuration(self, client_id: str) -> RTCConfiguration:
        """The daemon's own side of a call (`iceServers=[]`, never None: aiortc would add Google STUN)."""
        servers = []
        credential = None
        for url in self.daemon_urls:
            if url.is_turn:
                credential = credential or self.credential(client_id)
                assert credential is not None  # __post_init__: TURN URLs come with a secret
                servers.append(RTCIceServer(url.url, credential.username, credential.password))
            else:
                servers.append(RTCIceServer(url.url))
        return RTCConfiguration(iceServers=servers)

    def describe(self) -> str:
        """For the start-up log: URLs only, never a credential."""
        if not self.urls:
            return "none (host candidates only)"
        daemon = ", ".join(url.url for url in self.daemon_urls) or "none it can use"
        ttl = f"; TURN credentials valid {self.turn_ttl_s} s" if self.turn_secret else ""
        return f"{', '.join(url.url for url in self.urls)} (the daemon itself uses {daemon}{ttl})"
