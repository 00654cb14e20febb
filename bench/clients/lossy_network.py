"""A bad network between a loopback client and the daemon: loss, delay, jitter, a bandwidth cap and cuts,
applied at the client's own ICE sockets in both directions (the kernel's netem needs privileges this
machine does not give; everything here stays on 127.0.0.1).

Every datagram the client's ICE agent sends or receives, media, RTCP and STUN consent checks alike, meets
one `LinkDirection` per direction, which decides its fate: dropped (random loss, a cut, a full queue) or
delivered after a delay. The bandwidth cap is a FIFO bottleneck: each datagram takes size / rate to leave,
datagrams queue behind each other, and one that would wait longer than `queue_ms` is dropped (a router's
tail drop), so a sender over the cap sees both delay growth and loss, as on a real link. Randomness comes
from a seeded `random.Random`: a run is repeatable.

Usage (after the client's offer, when its ICE sockets exist):

    network = LossyNetwork(LinkConditions(loss=0.05))
    network.attach(client.pc)
    network.schedule_cut(after_s=3.0, duration_s=2.0)
    ...
    network.detach()
"""

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from aiortc import RTCPeerConnection

from streamer.transport.path_liveness import ice_connections

logger = logging.getLogger(__name__)

Address = tuple[Any, ...]


@dataclass(frozen=True)
class LinkConditions:
    """One direction's impairments. `rate_kbps=None`: no cap."""

    loss: float = 0.0  # probability that a datagram is lost
    delay_ms: float = 0.0  # one-way base delay
    jitter_ms: float = 0.0  # uniform extra delay in [0, jitter_ms): reorders datagrams
    rate_kbps: float | None = None  # bottleneck rate
    queue_ms: float = 200.0  # bottleneck queue: a datagram that would wait longer is dropped

    def __post_init__(self) -> None:
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError(f"loss is a probability, got {self.loss}")
        if self.delay_ms < 0 or self.jitter_ms < 0 or self.queue_ms < 0:
            raise ValueError("delays are >= 0")
        if self.rate_kbps is not None and self.rate_kbps <= 0:
            raise ValueError(f"rate_kbps must be > 0, got {self.rate_kbps}")


@dataclass
class LinkCounters:
    passed: int = 0
    lost: int = 0  # random loss
    cut: int = 0  # during a cut
    queue_full: int = 0  # tail drop at the bandwidth cap
    bytes_passed: int = 0

    @property
    def dropped(self) -> int:
        return self.lost + self.cut + self.queue_full


@dataclass
class LinkDirection:
    """The fate of each datagram in one direction; `clock` in seconds (the loop's, or a test's)."""

    conditions: LinkConditions
    rng: random.Random
    is_cut: Callable[[float], bool] = lambda now: False
    counters: LinkCounters = field(default_factory=LinkCounters)
    _link_free_at: float = 0.0

    def fate(self, size_bytes: int, now: float) -> float | None:
        """Seconds until this datagram arrives, or None when it is dropped."""
        if self.is_cut(now):
            self.counters.cut += 1
            return None
        if self.conditions.loss and self.rng.random() < self.conditions.loss:
            self.counters.lost += 1
            return None
        wait_s = 0.0
        if self.conditions.rate_kbps is not None:
            start = max(now, self._link_free_at)
            leaves_at = start + size_bytes * 8 / (self.conditions.rate_kbps * 1000.0)
            if leaves_at - now > self.conditions.queue_ms / 1000.0:
                self.counters.queue_full += 1
                return None
            self._link_free_at = leaves_at
            wait_s = leaves_at - now
        self.counters.passed += 1
        self.counters.bytes_passed += size_bytes
        jitter_s = (
            self.rng.random() * self.conditions.jitter_ms / 1000.0 if self.conditions.jitter_ms else 0.0
        )
        return wait_s + self.conditions.delay_ms / 1000.0 + jitter_s


class _ImpairedTransport:
    """Stands in for a StunProtocol's datagram transport: `sendto` goes through the uplink."""

    def __init__(self, transport: asyncio.DatagramTransport, network: "LossyNetwork") -> None:
        self.original = transport
        self._network = network

    def sendto(self, data: bytes, addr: Address | None = None) -> None:
        self._network.carry(self._network.uplink, data, lambda: self._send_now(data, addr))

    def _send_now(self, data: bytes, addr: Address | None) -> None:
        if not self.original.is_closing():
            self.original.sendto(data, addr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.original, name)


class LossyNetwork:
    """Both directions of one client's ICE path. `attach(pc)` after its offer; `detach()` puts the
    sockets back (idempotent; pending delayed datagrams are dropped, scheduled cuts cancelled).

    :param uplink: client -> daemon conditions (default: `downlink`'s, else none)
    :param downlink: daemon -> client conditions
    :param seed: for the loss and jitter draws (each direction has its own stream)
    """

    def __init__(
        self,
        downlink: LinkConditions | None = None,
        uplink: LinkConditions | None = None,
        *,
        seed: int = 0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        downlink = downlink or LinkConditions()
        self._clock = clock
        self._cuts: list[tuple[float, float]] = []  # (start, end) in clock seconds
        self.uplink = LinkDirection(uplink or replace(downlink), random.Random(seed), self.is_cut)
        self.downlink = LinkDirection(downlink, random.Random(seed + 1), self.is_cut)
        self._patched: list[tuple[Any, Any]] = []  # (StunProtocol, its original transport)
        self._timers: set[asyncio.TimerHandle] = set()

    def now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def is_cut(self, now: float) -> bool:
        return any(start <= now < end for start, end in self._cuts)

    def cut(self, duration_s: float) -> None:
        """Nothing passes either way for `duration_s` from now."""
        self.schedule_cut(0.0, duration_s)

    def schedule_cut(self, after_s: float, duration_s: float) -> tuple[float, float]:
        """A cut of `duration_s` starting `after_s` from now; returns its (start, end) on the clock."""
        start = self.now() + after_s
        window = (start, start + duration_s)
        self._cuts.append(window)
        return window

    def set_conditions(self, conditions: LinkConditions) -> None:
        """New conditions for both directions from now on (e.g. the cap lifted mid-call)."""
        self.uplink.conditions = conditions
        self.downlink.conditions = conditions

    def attach(self, pc: RTCPeerConnection) -> int:
        """Impair every ICE socket of `pc` (gathered by its setLocalDescription); how many were found."""
        for connection in ice_connections(pc):
            for protocol in connection._protocols:
                if protocol.transport is None or isinstance(protocol.transport, _ImpairedTransport):
                    continue
                self._patched.append((protocol, protocol.transport))
                protocol.transport = _ImpairedTransport(protocol.transport, self)
                received = protocol.datagram_received
                protocol.datagram_received = self._receiver(received)
        if not self._patched:
            raise RuntimeError("the peer connection has no ICE sockets yet: attach after its offer")
        return len(self._patched)

    def _receiver(self, deliver: Callable[[bytes, Address], None]) -> Callable[[bytes, Address], None]:
        def datagram_received(data: bytes, addr: Address) -> None:
            self.carry(self.downlink, data, lambda: deliver(data, addr))

        return datagram_received

    def carry(self, direction: LinkDirection, data: bytes, deliver: Callable[[], None]) -> None:
        delay_s = direction.fate(len(data), self.now())
        if delay_s is None:
            return
        if delay_s <= 0.0:
            deliver()
            return
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            deliver()

        handle = loop.call_later(delay_s, fire)
        self._timers.add(handle)

    def detach(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        for protocol, transport in self._patched:
            protocol.transport = transport
            protocol.__dict__.pop("datagram_received", None)  # back to the class's method
        self._patched.clear()

    def describe(self) -> dict[str, dict[str, int]]:
        """Counters per direction, for a test's message or a benchmark row."""
        return {
            name: {**vars(direction.counters), "dropped": direction.counters.dropped}
            for name, direction in (("uplink", self.uplink), ("downlink", self.downlink))
        }
