"""The process-wide changes a daemon makes to aiortc and aioice, applied and reverted as one unit.

aiortc and aioice read module and class attributes (the jitter buffer's frame release, the encoder
factory, the host addresses, the candidate binding and advertising) that have no per-connection
setting, so a daemon patches them for the whole process. `TransportPatches` sets every one of them
explicitly, the unset options to aioice's own behaviour, so an app never inherits another's
restriction, and `revert()` puts back exactly what was there before `apply()`, whoever had set it
(an earlier app, a test client). The app applies it in its cleanup context (web/app.py).
"""

import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import aioice.ice
import aiortc.rtcrtpsender
from aioice.ice import StunProtocol
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtcicetransport import RTCIceGatherer
from aiortc.rtcrtpreceiver import RTCRtpReceiver

from streamer.transport.codec_tuning import install_codec_tuning
from streamer.transport.ice_addresses import restrict_ice_addresses
from streamer.transport.ice_host_candidates import PortRange, advertise_public_address, restrict_ice_ports
from streamer.transport.jitter_marker import PATCH_FLAG, install_marker_release
from streamer.transport.jitter_recovery import RECOVERY_FLAG, install_loss_recovery
from streamer.transport.path_liveness import LIVENESS_FLAG, install_path_liveness

logger = logging.getLogger(__name__)

_MISSING = object()
# every attribute the calls in `apply` may change: (owner, name)
PATCHED_ATTRIBUTES: tuple[tuple[Any, str], ...] = (
    (JitterBuffer, "_remove_frame"),
    (JitterBuffer, PATCH_FLAG),
    (aiortc.rtcrtpsender, "get_encoder"),
    (aioice.ice, "get_host_addresses"),
    (aioice.ice.Connection, "get_component_candidates"),
    (RTCIceGatherer, "getLocalCandidates"),
    (JitterBuffer, "add"),
    (JitterBuffer, RECOVERY_FLAG),
    (RTCRtpReceiver, "_send_rtcp_pli"),
    (RTCRtpReceiver, "_send_rtcp_nack"),
    (StunProtocol, "connection_made"),
    (StunProtocol, "datagram_received"),
    (StunProtocol, "error_received"),
    (StunProtocol, LIVENESS_FLAG),
)


def snapshot() -> list[object]:
    """What every patched attribute holds now: the owner's own __dict__ entry (or a marker for none), so
    a class attribute is restored as it was defined."""
    return [vars(owner).get(name, _MISSING) for owner, name in PATCHED_ATTRIBUTES]


def restore(saved: list[object]) -> None:
    """Put back what `snapshot()` saw (an attribute that was not there is removed again)."""
    for (owner, name), value in zip(PATCHED_ATTRIBUTES, saved):
        if value is not _MISSING:
            setattr(owner, name, value)
        elif name in vars(owner):
            delattr(owner, name)


@dataclass
class TransportPatches:
    """One daemon's transport settings: the latency and loss-recovery fixes and the path-liveness tap
    always, and the ICE host candidate rules.

    `ice_addresses` empty: aioice's own choice of addresses; `port_range` None: ephemeral ports;
    `public_address` None: candidates show the bound addresses.
    """

    ice_addresses: tuple[str, ...] = ()
    port_range: PortRange | None = None
    public_address: str | None = None

    def __post_init__(self) -> None:
        self._saved: list[object] | None = None

    @property
    def applied(self) -> bool:
        return self._saved is not None

    def apply(self) -> None:
        if self._saved is not None:
            raise RuntimeError("TransportPatches.apply() called twice without revert()")
        self._saved = snapshot()
        install_marker_release()
        install_loss_recovery()
        install_path_liveness()
        install_codec_tuning()
        restrict_ice_addresses(self.ice_addresses)  # empty: aioice's own get_host_addresses again
        restrict_ice_ports(self.port_range)
        advertise_public_address(self.public_address)

    def revert(self) -> None:
        """Put back what `apply` found (idempotent; a no-op before apply)."""
        saved, self._saved = self._saved, None
        if saved is not None:
            restore(saved)

    def __enter__(self) -> Self:
        self.apply()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.revert()
