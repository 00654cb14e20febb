"""Is a silent peer still there? Tells a network gap (a Wi-Fi hiccup: nothing arrives for a while, but
the peer is alive) from a peer that is gone, so a session is not ended by a short cut of the path.

Both are silent, so silence alone cannot tell them apart. What can:
- ICE itself: aioice closes the connection when consent to send expires (RFC 7675: no answer to its
  consent checks for 30 s), and aiortc then reports the connection `failed`/`closed`;
- the peer's host: a process that exited leaves a closed port, and the host answers our datagrams (RTCP
  reports every second, consent checks) with ICMP port unreachable. Linux reports that on an unconnected
  UDP socket only with IP_RECVERR set, which the tap sets on every ICE socket; asyncio then hands the
  error to the protocol's `error_received`;
- when we last heard from the peer at all (any datagram on the ICE socket: media, RTCP, STUN, DTLS).

`path_state(pc)` is "gone" when ICE failed or closed, when the peer's host refused a datagram after the
last one we heard, or when nothing was heard for the consent lifetime; "gap" when nothing at all was
heard for PATH_SILENT_S (RTCP reports come every second, so a silent path is a cut one) but ICE is up and
consent fresh; "quiet" for a silence too short to tell (a gap starting, or two RTCP reports far apart);
otherwise "talking": the peer is reachable, and if it sends no video that is its choice.
`gap_ended_s_ago(pc)` says how long ago the path last came back from a gap, so a session gets time for
its video to resume (keyframe request, first frame) before silence counts against it again. The tap is a
class patch of aioice's StunProtocol, installed and reverted with the other process patches
(streamer/transport/process_patches.py).
"""

import logging
import socket
import time
from collections.abc import Callable
from typing import Any, Literal

from aioice.ice import StunProtocol
from aiortc import RTCPeerConnection

logger = logging.getLogger(__name__)

PathState = Literal["talking", "quiet", "gap", "gone"]
CONSENT_LIFETIME_S = 30.0  # RFC 7675 section 5.1: consent expires 30 s after the last answer
PATH_SILENT_S = 2.0  # nothing heard this long (RTCP every 0.5-1.5 s): the path is cut
QUIET_S = 1.0  # nothing heard this long: not yet known whether the path is cut ("quiet")
LIVENESS_FLAG = "_livefuse_path_liveness"
IP_RECVERR = getattr(socket, "IP_RECVERR", 11)  # Linux values; other systems ignore the option
IPV6_RECVERR = getattr(socket, "IPV6_RECVERR", 25)

_ORIGINAL_CONNECTION_MADE: Callable[..., None] = StunProtocol.connection_made
_ORIGINAL_DATAGRAM_RECEIVED: Callable[..., None] = StunProtocol.datagram_received
_ORIGINAL_ERROR_RECEIVED: Callable[..., None] = StunProtocol.error_received


def _connection_made(protocol: StunProtocol, transport: Any) -> None:
    _ORIGINAL_CONNECTION_MADE(protocol, transport)
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    level, option = (
        (socket.IPPROTO_IPV6, IPV6_RECVERR)
        if sock.family == socket.AF_INET6
        else (socket.IPPROTO_IP, IP_RECVERR)
    )
    try:
        sock.setsockopt(level, option, 1)
    except OSError as error:  # not Linux: the refusal signal is lost, the consent lifetime still holds
        logger.debug("IP_RECVERR not available on this ICE socket: %s", error)


def _datagram_received(protocol: StunProtocol, data: bytes, addr: tuple[Any, ...]) -> None:
    now = time.monotonic()
    heard_at = getattr(protocol, "_livefuse_heard_at", None)
    if heard_at is not None and now - heard_at > PATH_SILENT_S:
        protocol._livefuse_gap_ended_at = now  # type: ignore[attr-defined]
    protocol._livefuse_heard_at = now  # type: ignore[attr-defined]
    _ORIGINAL_DATAGRAM_RECEIVED(protocol, data, addr)


def _error_received(protocol: StunProtocol, exc: Exception) -> None:
    if isinstance(exc, ConnectionRefusedError):
        protocol._livefuse_refused_at = time.monotonic()  # type: ignore[attr-defined]
    _ORIGINAL_ERROR_RECEIVED(protocol, exc)


def install_path_liveness() -> None:
    """Tap aioice's ICE sockets (idempotent; reverted by TransportPatches)."""
    if getattr(StunProtocol, LIVENESS_FLAG, False):
        return
    StunProtocol.connection_made = _connection_made  # type: ignore[method-assign,assignment]
    StunProtocol.datagram_received = _datagram_received  # type: ignore[method-assign,assignment]
    StunProtocol.error_received = _error_received  # type: ignore[method-assign,assignment]
    setattr(StunProtocol, LIVENESS_FLAG, True)


def ice_connections(pc: RTCPeerConnection) -> list[Any]:
    """The aioice connections under `pc`'s transceivers (one with BUNDLE) and its data channel."""
    dtls_transports = [t.receiver.transport for t in pc.getTransceivers() if t.receiver.transport is not None]
    if pc.sctp is not None:
        dtls_transports.append(pc.sctp.transport)
    found = {id(dtls.transport._connection): dtls.transport._connection for dtls in dtls_transports}
    return list(found.values())


def _nominated_protocols(pc: RTCPeerConnection) -> list[Any]:
    return [pair.protocol for connection in ice_connections(pc) for pair in connection._nominated.values()]


def _latest(protocols: list[Any], name: str) -> float:
    return max((getattr(protocol, name, None) or 0.0 for protocol in protocols), default=0.0)


def path_state(pc: RTCPeerConnection | None, now: float | None = None) -> PathState:
    """ "talking", "gap" (silent path, peer presumed there) or "gone" (see the module docstring)."""
    if (
        pc is None
        or pc.connectionState in ("failed", "closed")
        or pc.iceConnectionState in ("failed", "closed")
    ):
        return "gone"
    now = time.monotonic() if now is None else now
    protocols = _nominated_protocols(pc)
    if not protocols:
        return "gone"  # no path was ever chosen
    heard = _latest(protocols, "_livefuse_heard_at")
    if _latest(protocols, "_livefuse_refused_at") > heard:
        return "gone"  # the peer's host says nobody listens there any more
    if not heard:
        return "talking"  # the tap came after the last datagram: nothing known, nothing to wait for
    silent_s = now - heard
    if silent_s > CONSENT_LIFETIME_S:
        return "gone"
    if silent_s > PATH_SILENT_S:
        return "gap"
    return "quiet" if silent_s > QUIET_S else "talking"


def gap_ended_s_ago(pc: RTCPeerConnection | None, now: float | None = None) -> float | None:
    """Seconds since the path last came back from a gap; None if it never had one."""
    if pc is None:
        return None
    ended = _latest(_nominated_protocols(pc), "_livefuse_gap_ended_at")
    return (time.monotonic() if now is None else now) - ended if ended else None
