"""The address of the client behind a request, for the rate limiter, the audit log and refusal logs.

Behind a proxy (the shipped HAProxy, a Kubernetes Ingress) the TCP peer is the proxy: keyed on it, every
client would share one rate-limit bucket and the audit log would name the proxy. The proxy says who its
client was in `X-Forwarded-For` (HAProxy's `option forwardfor`) or `Forwarded` (RFC 7239). Anyone can
send those headers, so they are read only when the TCP peer is one of `--trusted-proxies` (CIDRs); from
any other peer they are ignored. The chain is read right to left (each proxy appends the address it saw):
addresses of trusted proxies are skipped, and the first untrusted one is the client. A malformed entry
ends the walk at the trusted hop before it (nothing left of a broken link can be believed).
`X-Forwarded-For` wins when a trusted peer sends both: the shipped proxies (HAProxy `option forwardfor`,
ingress-nginx) write that one and pass a client's own `Forwarded` through untouched; `Forwarded` is read
from proxies that write only it.

`client_address_middleware` runs first and records that client in the request's state (which every
`request.clone()` copies; a cloned `remote` would be lost by the next clone); the rate limiter
(web/limits.py), the audit line and the refusal log (web/auth.py) read it with `client_address(request)`.
"""

import ipaddress
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gpu_ops.errors import InvalidInputError

logger = logging.getLogger(__name__)

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
CLIENT_ADDRESS_KEY = web.RequestKey("client_address", str)


def parse_trusted_proxies(text: str) -> tuple[IpNetwork, ...]:
    """`--trusted-proxies 10.0.0.0/8,fd00::/8,127.0.0.1`: networks (a bare address is a /32 or /128)."""
    networks: list[IpNetwork] = []
    for part in (piece.strip() for piece in text.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise InvalidInputError(
                f"--trusted-proxies {part!r}: give CIDRs or addresses, e.g. 10.0.0.0/8,fd00::/8"
            ) from None
    return tuple(networks)


def parse_node(text: str) -> IpAddress | None:
    """One hop of a forwarding chain: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]:4711`;
    None for anything else (`unknown`, `_hidden` obfuscated names, garbage)."""
    node = text.strip().strip('"')
    if node.startswith("["):
        node, bracket, _ = node[1:].partition("]")
        if not bracket:
            return None
    elif node.count(":") == 1:  # IPv4 with a port; a bare IPv6 has two or more colons
        node = node.partition(":")[0]
    try:
        address = ipaddress.ip_address(node.partition("%")[0])  # a zone id says nothing about the host
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # ::ffff:192.0.2.1 from a dual-stack socket is that IPv4 client
    return address


@dataclass(frozen=True)
class TrustedProxies:
    """The proxies whose forwarding headers are believed; empty: believe none (the default)."""

    networks: tuple[IpNetwork, ...] = ()

    def trusts(self, address: IpAddress) -> bool:
        return any(address.version == network.version and address in network for network in self.networks)

    def client_of(self, peer: str | None, forwarded_for: Sequence[str]) -> str | None:
        """The client: `peer` itself unless it is trusted; then the right-most untrusted hop of
        `forwarded_for` (the chain as the headers list it, left = farthest from us)."""
        peer_address = parse_node(peer) if peer is not None else None
        if peer_address is None or not self.trusts(peer_address):
            return peer
        client = peer_address
        for hop in reversed(forwarded_for):
            address = parse_node(hop)
            if address is None:
                break  # a broken link: the trusted hop to its right is the last one we can believe
            client = address
            if not self.trusts(address):
                break
        return str(client)


def forwarded_chain(headers: Mapping[str, str], forwarded: Iterable[Mapping[str, str]]) -> list[str]:
    """The comma-separated hops of every `X-Forwarded-For` header, in order, when there are any, else
    the `for=` hops of `Forwarded` (parsed by aiohttp into one mapping per element)."""
    getall = getattr(headers, "getall", None)
    values = getall("X-Forwarded-For", []) if getall is not None else [headers.get("X-Forwarded-For", "")]
    hops = [hop.strip() for value in values for hop in value.split(",") if hop.strip()]
    return hops or [element["for"] for element in forwarded if "for" in element]


def client_address(request: web.Request) -> str | None:
    """The client behind `request`: what the middleware found, else the TCP peer."""
    return request.get(CLIENT_ADDRESS_KEY, request.remote)


def client_address_middleware(trusted: TrustedProxies) -> Middleware:
    """The first middleware: records the client's address for `client_address(request)`."""

    @web.middleware
    async def set_client_address(request: web.Request, handler: Handler) -> web.StreamResponse:
        if trusted.networks:
            client = trusted.client_of(request.remote, forwarded_chain(request.headers, request.forwarded))
            if client is not None:
                request[CLIENT_ADDRESS_KEY] = client
        return await handler(request)

    return set_client_address
