from collections.abc import Iterator

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection

from streamer.transport.ice_addresses import current_host_addresses, restrict_ice_addresses

# aiortc's default adds Google's STUN server: test peers stay on loopback (DESIGN.md section 7)
NO_ICE_SERVERS = RTCConfiguration(iceServers=[])


@pytest.fixture(autouse=True)
def loopback_afterwards() -> Iterator[None]:
    yield
    restrict_ice_addresses(["127.0.0.1"])  # the rule for every test in this process


def test_only_configured_addresses_are_offered() -> None:
    restrict_ice_addresses(["127.0.0.1", "::1"])
    assert current_host_addresses() == ["127.0.0.1", "::1"]
    restrict_ice_addresses(["127.0.0.1"])
    assert current_host_addresses() == ["127.0.0.1"]


def test_rejects_non_addresses() -> None:
    with pytest.raises(ValueError):
        restrict_ice_addresses(["localhost"])


async def test_gathered_candidates_are_loopback_only() -> None:
    restrict_ice_addresses(["127.0.0.1"])
    pc = RTCPeerConnection(NO_ICE_SERVERS)
    try:
        pc.addTransceiver("video")
        await pc.setLocalDescription(await pc.createOffer())
        candidates = [line for line in pc.localDescription.sdp.splitlines() if line.startswith("a=candidate")]
        assert candidates, "no candidate gathered"
        assert all(" 127.0.0.1 " in line for line in candidates), candidates
    finally:
        await pc.close()
