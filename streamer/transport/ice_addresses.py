"""Restrict the host addresses aioice offers as ICE candidates (`serve --ice-address`, tests).

aioice gathers host candidates from every interface (and skips 127.0.0.1). Tests must stay on loopback
(DESIGN.md section 7) and a daemon may want to offer only one address, so `get_host_addresses` is
replaced by a function returning exactly the configured list. An empty list restores aioice's own choice.
"""

import ipaddress
import logging
from collections.abc import Callable, Sequence

import aioice.ice

logger = logging.getLogger(__name__)

HostAddresses = Callable[[bool, bool], list[str]]

_ORIGINAL_GET_HOST_ADDRESSES: HostAddresses = aioice.ice.get_host_addresses


def _fixed_host_addresses(addresses: tuple[str, ...]) -> HostAddresses:
    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        chosen = []
        for address in addresses:
            version = ipaddress.ip_address(address).version
            if (version == 4 and use_ipv4) or (version == 6 and use_ipv6):
                chosen.append(address)
        return chosen

    return get_host_addresses


def restrict_ice_addresses(addresses: Sequence[str]) -> None:
    """Offer only `addresses` as ICE host candidates from now on (process-wide; idempotent)."""
    checked = tuple(str(ipaddress.ip_address(address)) for address in addresses)  # ValueError on junk
    if not checked:
        aioice.ice.get_host_addresses = _ORIGINAL_GET_HOST_ADDRESSES  # type: ignore[assignment]
        return
    aioice.ice.get_host_addresses = _fixed_host_addresses(checked)  # type: ignore[assignment]
    logger.info("ICE host candidates restricted to %s", ", ".join(checked))


def current_host_addresses() -> list[str]:
    """What aioice will gather now (IPv4 and IPv6)."""
    return list(aioice.ice.get_host_addresses(True, True))
