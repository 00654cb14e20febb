"""Host candidates in a port range and under a public address, gathered for real on 127.0.0.1 (a STUN
server stand-in on loopback answers the server-reflexive query)."""

import logging
import socket
from collections.abc import Iterator

import aioice.ice
import pytest
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection

from gpu_ops.errors import InvalidInputError
from streamer.transport.ice_addresses import restrict_ice_addresses
from streamer.transport.ice_host_candidates import (
    PortRange,
    advertise_public_address,
    check_public_address,
    restrict_ice_ports,
)
from tests.loopback_ice import free_udp_range, stun_server


@pytest.fixture(autouse=True)
def aioices_own_behaviour_afterwards() -> Iterator[None]:
    restrict_ice_addresses(["127.0.0.1"])
    yield
    restrict_ice_ports(None)
    advertise_public_address(None)
    restrict_ice_addresses(["127.0.0.1"])


async def offer_candidates(configuration: RTCConfiguration | None = None) -> list[list[str]]:
    """The a=candidate lines of a fresh offer, split into fields (foundation ... typ TYPE ...)."""
    pc = RTCPeerConnection(configuration or RTCConfiguration(iceServers=[]))
    try:
        pc.addTransceiver("video")
        await pc.setLocalDescription(await pc.createOffer())
        lines = pc.localDescription.sdp.splitlines()
        return [line.split() for line in lines if line.startswith("a=candidate:")]
    finally:
        await pc.close()


def test_port_ranges_parse_or_say_what_to_give() -> None:
    assert PortRange.parse("50000-50099") == PortRange(50000, 50099)
    assert len(PortRange.parse(" 10 - 10 ")) == 1
    for text in ("50000", "50000-", "a-b", "50099-50000", "0-10", "1-70000", "1,2"):
        with pytest.raises(InvalidInputError, match="--ice-port-range"):
            PortRange.parse(text)


async def test_host_candidates_are_bound_in_the_range_and_shaped_as_aioice_makes_them() -> None:
    stock = await offer_candidates()
    ports = free_udp_range(8)
    restrict_ice_ports(ports)
    ranged = await offer_candidates()
    assert len(ranged) == len(stock) == 1
    assert ports.first <= int(ranged[0][5]) <= ports.last
    # foundation, component, transport, priority, address and type as aioice's own
    assert [ranged[0][i] for i in (0, 1, 2, 3, 4, 7)] == [stock[0][i] for i in (0, 1, 2, 3, 4, 7)]
    restrict_ice_ports(None)
    assert not ports.first <= int((await offer_candidates())[0][5]) <= ports.last, "ephemeral again"


async def test_each_call_takes_the_next_free_port_round_the_range() -> None:
    ports = free_udp_range(3)
    restrict_ice_ports(ports)
    seen = [int((await offer_candidates())[0][5]) for _ in range(4)]
    assert seen[:3] == [ports.first, ports.first + 1, ports.last]
    assert seen[3] == ports.first, "released ports are used again after the range wrapped"


async def test_a_full_range_gives_no_host_candidate_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    ports = free_udp_range(1)
    restrict_ice_ports(ports)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind(("127.0.0.1", ports.first))
        with caplog.at_level(logging.WARNING, logger="streamer.transport.ice_host_candidates"):
            assert await offer_candidates() == []
    assert "no free UDP port in --ice-port-range" in caplog.text


async def test_server_reflexive_candidates_still_come_from_the_ranged_socket() -> None:
    ports = free_udp_range(4)
    restrict_ice_ports(ports)
    async with stun_server() as port:
        candidates = await offer_candidates(
            RTCConfiguration(iceServers=[RTCIceServer(f"stun:127.0.0.1:{port}")])
        )
    by_type = {fields[7]: fields for fields in candidates}
    assert set(by_type) == {"host", "srflx"}
    host, srflx = by_type["host"], by_type["srflx"]
    assert srflx[4:6] == host[4:6], "the STUN server saw the ranged socket"
    assert srflx[8:12] == ["raddr", "127.0.0.1", "rport", host[5]]


async def test_the_public_address_is_advertised_while_the_socket_stays_local() -> None:
    advertise_public_address("203.0.113.9")
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        pc.addTransceiver("video")
        await pc.setLocalDescription(await pc.createOffer())
        sdp = pc.localDescription.sdp
        candidates = [line for line in sdp.splitlines() if line.startswith("a=candidate:")]
        assert candidates and all(" 203.0.113.9 " in line and "typ host" in line for line in candidates)
        assert "c=IN IP4 203.0.113.9" in sdp
        transport = pc.getTransceivers()[0].receiver.transport.transport
        connection: aioice.ice.Connection = transport.iceGatherer._connection
        assert [candidate.host for candidate in connection.local_candidates] == ["127.0.0.1"]
    finally:
        await pc.close()
    advertise_public_address(None)
    assert [fields[4] for fields in await offer_candidates()] == ["127.0.0.1"]


def test_public_address_must_be_one_unicast_ip() -> None:
    assert check_public_address(" 203.0.113.9 ") == "203.0.113.9"
    assert check_public_address("2001:db8::5") == "2001:db8::5"
    for text in ("turn.example.net", "0.0.0.0", "224.0.0.1", "203.0.113.9/32"):
        with pytest.raises(InvalidInputError, match="--public-address"):
            check_public_address(text)
