"""Loopback helpers for ICE tests: a STUN server stand-in on 127.0.0.1 for peers given STUN/TURN URLs
(it answers BINDING requests with the sender's address, so gathering finishes at once and no packet
leaves loopback: a URL naming a real host would send the daemon's queries off the machine), and a range
of free UDP ports for `--ice-port-range`."""

import asyncio
import random
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from aioice import stun

from streamer.transport.ice_host_candidates import PortRange

# a TCP port nobody listens on: a turn:...?transport=tcp URL there fails at once (UDP would wait 5 s)
CLOSED_TCP_PORT = 9


def binding_response(data: bytes, sender: tuple[str, int]) -> bytes:
    """A STUN server's answer to a BINDING request: the sender's address, XOR-mapped."""
    request = stun.parse_message(data)
    response = stun.Message(
        message_method=stun.Method.BINDING,
        message_class=stun.Class.RESPONSE,
        transaction_id=request.transaction_id,
    )
    response.attributes["XOR-MAPPED-ADDRESS"] = sender
    return bytes(response)


class StunResponder(asyncio.DatagramProtocol):
    """Answers BINDING requests with the sender's address, as a STUN server does."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.requests = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a datagram endpoint's transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        assert self.transport is not None
        self.requests += 1
        self.transport.sendto(binding_response(data, addr), addr)


@asynccontextmanager
async def stun_server() -> AsyncIterator[int]:
    """The UDP port of a STUN stand-in on 127.0.0.1, for the duration of the block."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(StunResponder, local_addr=("127.0.0.1", 0))
    try:
        yield transport.get_extra_info("sockname")[1]
    finally:
        transport.close()


@contextmanager
def stun_server_thread() -> Iterator[int]:
    """The same stand-in on a thread, for peers in other processes (a daemon, a browser)."""
    stopping = threading.Event()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        server.settimeout(0.1)

        def answer() -> None:
            while not stopping.is_set():
                try:
                    data, sender = server.recvfrom(2048)
                    server.sendto(binding_response(data, sender), sender)
                except (TimeoutError, ValueError):
                    continue  # nothing yet, or not a STUN message

        thread = threading.Thread(target=answer, name="stun-stand-in", daemon=True)
        thread.start()
        try:
            yield server.getsockname()[1]
        finally:
            stopping.set()
            thread.join(timeout=5)


def free_udp_range(size: int) -> PortRange:
    """`size` consecutive UDP ports on 127.0.0.1 that were free a moment ago, below Linux's ephemeral
    range (32768-60999), so an ephemeral bind never lands in it by chance."""
    for _ in range(50):
        first = random.randrange(20000, 30000)
        probes = []
        try:
            for port in range(first, first + size):
                probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
        return PortRange(first, first + size - 1)
    raise AssertionError("no free port range")
