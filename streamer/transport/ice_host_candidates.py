"""The daemon's ICE host candidates behind NAT: bound only in a fixed UDP port range
(`serve --ice-port-range MIN-MAX`, so a firewall or a container publishes exactly those ports) and
advertised with the 1:1 NAT's public address (`serve --public-address IP`).

Port range: aioice 0.13 binds each host candidate with `create_datagram_endpoint(local_addr=(address,
0))` inside `Connection.get_component_candidates` and has no option for a range (aioice issue #47; the
PR adding one is not merged). `restrict_ice_ports` replaces that method in one place: host sockets are
bound here, trying the range's ports from a rotating start (a port just released is not handed to the
next call at once), then the server-reflexive candidates (STUN) are asked for exactly as aioice does,
and the relayed one (TURN) comes from aioice's own method called with no host address. STUN and TURN
client sockets are outbound and keep ephemeral ports.

Public address: `advertise_public_address` rewrites the address of host candidates where aiortc turns
them into SDP (`RTCIceGatherer.getLocalCandidates`). The socket stays bound to the local address; the
NAT maps public:port to it 1:1, so the remote's checks arrive on the same port and aioice matches them by
socket, not by the advertised address.

Both are process-wide like `ice_addresses`; `None` restores aioice's or aiortc's own behaviour.
"""

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aioice.ice
import aioice.turn
from aioice.candidate import Candidate, candidate_foundation, candidate_priority
from aiortc import RTCIceCandidate
from aiortc.rtcicetransport import RTCIceGatherer

from gpu_ops.errors import InvalidInputError

logger = logging.getLogger(__name__)

ComponentCandidates = Callable[
    [aioice.ice.Connection, int, list[str], int], Coroutine[Any, Any, list[Candidate]]
]
LocalCandidates = Callable[[RTCIceGatherer], list[RTCIceCandidate]]

_ORIGINAL_COMPONENT_CANDIDATES: ComponentCandidates = aioice.ice.Connection.get_component_candidates
_ORIGINAL_LOCAL_CANDIDATES: LocalCandidates = RTCIceGatherer.getLocalCandidates
PORT_RANGE = re.compile(r"^\s*(\d{1,5})\s*-\s*(\d{1,5})\s*$")


@dataclass(frozen=True)
class PortRange:
    """An inclusive UDP port range for host candidates."""

    first: int
    last: int

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.last <= 65535:
            raise InvalidInputError(
                f"--ice-port-range {self.first}-{self.last}: give MIN-MAX with 1 <= MIN <= MAX <= 65535"
            )

    @classmethod
    def parse(cls, text: str) -> "PortRange":
        match = PORT_RANGE.match(text)
        if match is None:
            raise InvalidInputError(f"--ice-port-range {text!r}: give MIN-MAX, e.g. 50000-50099")
        return cls(int(match[1]), int(match[2]))

    def __len__(self) -> int:
        return self.last - self.first + 1

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


class _PortCursor:
    """Hands out the range's ports round-robin, so each search starts after the last port bound."""

    def __init__(self, ports: PortRange) -> None:
        self.ports = ports
        self._next = ports.first

    def search_order(self) -> list[int]:
        start = self._next - self.ports.first
        span = range(self.ports.first, self.ports.last + 1)
        return [*span[start:], *span[:start]]

    def taken(self, port: int) -> None:
        self._next = port + 1 if port < self.ports.last else self.ports.first


def bind_in_range(address: str, cursor: _PortCursor) -> socket.socket | None:
    """A non-blocking UDP socket bound to `address` on the first free port of the range, or None."""
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    for port in cursor.search_order():
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.bind((address, port))
        except OSError:
            sock.close()
            continue
        sock.setblocking(False)
        cursor.taken(port)
        return sock
    return None


def _host_candidates_in(ports: PortRange) -> ComponentCandidates:
    cursor = _PortCursor(ports)

    async def get_component_candidates(
        connection: aioice.ice.Connection, component: int, addresses: list[str], timeout: int = 5
    ) -> list[Candidate]:
        loop = asyncio.get_running_loop()
        host_protocols = []
        for address in addresses:
            sock = bind_in_range(address, cursor)
            if sock is None:
                logger.warning(
                    "no free UDP port in --ice-port-range %s on %s: no host candidate for this call "
                    "(widen the range or lower --max-sessions)",
                    ports,
                    address,
                    extra={"event": "ice_port_range_full"},
                )
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, aioice.turn.UDP_SOCKET_BUFFER_SIZE)
                _, protocol = await loop.create_datagram_endpoint(
                    lambda: aioice.ice.StunProtocol(connection), sock=sock
                )
            except BaseException:
                sock.close()
                raise
            host, port = sock.getsockname()[:2]
            protocol.local_candidate = Candidate(  # exactly the host candidate aioice makes
                foundation=candidate_foundation("host", "udp", host),
                component=component,
                transport="udp",
                priority=candidate_priority(component, "host"),
                host=host,
                port=port,
                type="host",
            )
            host_protocols.append(protocol)
        connection._protocols += host_protocols
        # server-reflexive (IPv4 hosts, as aioice) and relayed candidates, asked for at the same time
        tasks: list[asyncio.Task[tuple[Candidate, object]]] = []
        if connection.stun_server:
            for protocol in host_protocols:
                if ipaddress.ip_address(protocol.local_candidate.host).version == 4:
                    query = aioice.ice.server_reflexive_candidate(protocol, connection.stun_server)
                    tasks.append(asyncio.create_task(query))
        relayed = asyncio.create_task(_ORIGINAL_COMPONENT_CANDIDATES(connection, component, [], timeout))
        reflexive = []
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=timeout)
            reflexive = [task.result()[0] for task in done if task.exception() is None]
            for task in pending:
                task.cancel()
        return [protocol.local_candidate for protocol in host_protocols] + reflexive + await relayed

    return get_component_candidates


def restrict_ice_ports(ports: PortRange | None) -> None:
    """Bind host candidates only in `ports` from now on (process-wide); None: ephemeral ports again."""
    connection_class: Any = aioice.ice.Connection  # Any: mypy refuses assigning to a method
    if ports is None:
        connection_class.get_component_candidates = _ORIGINAL_COMPONENT_CANDIDATES
        return
    connection_class.get_component_candidates = _host_candidates_in(ports)
    logger.info("ICE host candidates bound in UDP %s", ports)


def check_public_address(text: str) -> str:
    """The address for `--public-address`: one unicast IP literal (candidates carry addresses, not names)."""
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        raise InvalidInputError(
            f"--public-address {text!r}: give the NAT's public IP address (not a host name)"
        ) from None
    if address.is_unspecified or address.is_multicast:
        raise InvalidInputError(f"--public-address {text!r}: give a unicast address")
    return str(address)


def _advertising(public_address: str) -> LocalCandidates:
    version = ipaddress.ip_address(public_address).version

    def get_local_candidates(gatherer: RTCIceGatherer) -> list[RTCIceCandidate]:
        candidates = _ORIGINAL_LOCAL_CANDIDATES(gatherer)
        for candidate in candidates:  # fresh copies each call: changing them changes nothing in aioice
            if candidate.type == "host" and ipaddress.ip_address(candidate.ip).version == version:
                candidate.ip = public_address
        return candidates

    return get_local_candidates


def advertise_public_address(public_address: str | None) -> None:
    """Show `public_address` in host candidates of its IP version (process-wide); None: the bound ones."""
    gatherer_class: Any = RTCIceGatherer  # Any: mypy refuses assigning to a method
    if public_address is None:
        gatherer_class.getLocalCandidates = _ORIGINAL_LOCAL_CANDIDATES
        return
    checked = check_public_address(public_address)
    gatherer_class.getLocalCandidates = _advertising(checked)
    logger.info("ICE host candidates advertised as %s (1:1 NAT)", checked)
