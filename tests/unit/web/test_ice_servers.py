"""ICE servers handed to clients (GET /api/ice-servers, RFC 9725 Link headers on every 201 that answers an
offer) and Location headers under --public-url, against the real app with the fake pipeline."""

import base64
import hashlib
import hmac
import re
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiortc import RTCConfiguration, RTCPeerConnection

from streamer.transport.ice_addresses import restrict_ice_addresses
from streamer.transport.ice_servers import IceServerPlan, parse_ice_server_urls
from tests.fakes_pipeline import fake_binding
from tests.loopback_ice import CLOSED_TCP_PORT, stun_server
from web.app import create_app
from web.app_keys import ENGINE_KEY
from web.daemon_config import DaemonConfig
from web.ice_servers import ice_server_links

TOKEN = "ice-servers-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "shared-with-coturn-0123456789"
# loopback only: the daemon's own peers use the first STUN and TURN URL (a STUN stand-in answers; the TCP
# TURN port is closed, so its allocation fails at once); clients get all four in the Links
URL_PATTERN = (
    "stun:127.0.0.1:{stun},turn:127.0.0.1:{closed}?transport=tcp,turn:127.0.0.1:{closed}?transport=udp,"
    "turns:127.0.0.1:{closed}"
)
PUBLIC_URL = "https://livefuse-1.example.com"
LINK = re.compile(r'^<(?P<url>[^>]+)>; rel="ice-server"(?P<params>.*)$')
PARAM = re.compile(r'; ([a-z-]+)="([^"]*)"')


def make_config(urls: str, **changes: object) -> DaemonConfig:
    ice = IceServerPlan(parse_ice_server_urls(urls), SECRET, 600)
    fields = {"ice_addresses": ("127.0.0.1",), "token": TOKEN, "ice": ice, "public_url": PUBLIC_URL} | changes
    return DaemonConfig(**fields)  # type: ignore[arg-type]


@pytest.fixture
async def urls() -> AsyncIterator[str]:
    async with stun_server() as port:
        yield URL_PATTERN.format(stun=port, closed=CLOSED_TCP_PORT)


@pytest.fixture
async def client(urls: str) -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    app = create_app(make_config(urls), fake_binding)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        await app[ENGINE_KEY].loaded
        yield test_client


async def offer_sdp(direction: str = "sendrecv") -> str:
    restrict_ice_addresses(["127.0.0.1"])
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        pc.addTransceiver("video", direction=direction)
        await pc.setLocalDescription(await pc.createOffer())
        return pc.localDescription.sdp
    finally:
        await pc.close()


def valid_turn_credential(username: str, password: str) -> bool:
    """What coturn's use-auth-secret checks: the HMAC of the username, and an expiry in the future."""
    expected = base64.b64encode(hmac.new(SECRET.encode(), username.encode(), hashlib.sha1).digest()).decode()
    return hmac.compare_digest(expected, password) and int(username.split(":")[0]) > time.time()


def parse_links(values: list[str]) -> dict[str, dict[str, str]]:
    links = {}
    for value in values:
        match = LINK.match(value)
        assert match is not None, value
        links[match["url"]] = dict(PARAM.findall(match["params"]))
    return links


def assert_ice_server_links(values: list[str], urls: str) -> None:
    links = parse_links(values)
    assert list(links) == urls.split(","), "one Link per URL, in order"
    assert links[urls.split(",")[0]] == {}, "STUN: no credential"
    turn = [links[url] for url in links if url.startswith("turn")]
    for params in turn:
        assert params["credential-type"] == "password"
        assert valid_turn_credential(params["username"], params["credential"])
    assert turn[0] == turn[1] == turn[2], "one credential for every TURN URL of a client"


async def test_the_page_gets_every_server_with_a_fresh_credential(client: TestClient, urls: str) -> None:  # type: ignore[type-arg]
    assert (await client.get("/api/ice-servers")).status == 401, "a TURN credential needs the token"
    response = await client.get("/api/ice-servers", headers=AUTH)
    assert response.status == 200 and response.headers["Cache-Control"] == "no-store"
    body = await response.json()
    stun, turn = body["iceServers"]
    assert stun == {"urls": urls.split(",")[:1]}
    assert turn["urls"] == urls.split(",")[1:]
    assert valid_turn_credential(turn["username"], turn["credential"])
    assert body["expiresAt"] == int(turn["username"].split(":")[0])
    assert 590 <= body["expiresAt"] - time.time() <= 601
    again = await (await client.get("/api/ice-servers", headers=AUTH)).json()
    assert again["iceServers"][1]["username"] != turn["username"], "one credential per client"


async def test_no_servers_configured_means_an_empty_list() -> None:
    app = create_app(DaemonConfig(ice_addresses=("127.0.0.1",)), fake_binding)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        body = await (await client.get("/api/ice-servers")).json()
        assert body == {"iceServers": [], "expiresAt": None}
        response = await client.post("/api/sessions", json={"sdp": await offer_sdp(), "type": "offer"})
        assert response.status == 201 and "Link" not in response.headers
        assert response.headers["Location"].startswith("/api/sessions/"), "no --public-url: a path"


async def test_a_session_answer_carries_links_and_an_absolute_location(client: TestClient, urls: str) -> None:  # type: ignore[type-arg]
    response = await client.post(
        "/api/sessions", json={"sdp": await offer_sdp(), "type": "offer"}, headers=AUTH
    )
    assert response.status == 201
    session_id = (await response.json())["id"]
    assert response.headers["Location"] == f"{PUBLIC_URL}/api/sessions/{session_id}"
    assert_ice_server_links(response.headers.getall("Link"), urls)
    assert response.headers["Cache-Control"] == "no-store"
    # the SDP flavour (WHIP-style) of the same route
    sdp_response = await client.post(
        "/api/sessions", data=await offer_sdp(), headers={**AUTH, "Content-Type": "application/sdp"}
    )
    assert sdp_response.status == 201
    assert sdp_response.headers["Location"].startswith(f"{PUBLIC_URL}/api/sessions/")
    assert_ice_server_links(sdp_response.headers.getall("Link"), urls)


async def test_whip_and_whep_answers_carry_links_and_absolute_locations(
    client: TestClient, urls: str
) -> None:  # type: ignore[type-arg]
    sdp_headers = {**AUTH, "Content-Type": "application/sdp"}
    whip = await client.post("/whip", data=await offer_sdp("sendonly"), headers=sdp_headers)
    assert whip.status == 201, await whip.text()
    location = whip.headers["Location"]
    assert re.fullmatch(rf"{re.escape(PUBLIC_URL)}/whip/[0-9a-f]+", location)
    assert_ice_server_links(whip.headers.getall("Link"), urls)
    session_id = location.rsplit("/", 1)[-1]

    whep = await client.post(f"/whep/{session_id}", data=await offer_sdp("recvonly"), headers=sdp_headers)
    assert whep.status == 201, await whep.text()
    assert re.fullmatch(rf"{re.escape(PUBLIC_URL)}/whep/{session_id}/[0-9a-f]+", whep.headers["Location"])
    assert_ice_server_links(whep.headers.getall("Link"), urls)

    # the path of each Location is what this daemon answers (the proxy maps PUBLIC_URL to it)
    viewer_path = whep.headers["Location"].removeprefix(PUBLIC_URL)
    assert (await client.delete(viewer_path, headers=AUTH)).status == 200
    assert (await client.delete(location.removeprefix(PUBLIC_URL), headers=AUTH)).status == 200


def test_link_values_follow_rfc_9725_section_4_6() -> None:
    plan = IceServerPlan(
        parse_ice_server_urls("stun:s.example,turn:t.example"), SECRET, 600, clock=lambda: 1e9
    )
    stun, turn = ice_server_links(plan, "abc")
    assert stun == '<stun:s.example>; rel="ice-server"'
    credential = plan.credential("abc")
    assert credential is not None
    assert turn == (
        f'<turn:t.example>; rel="ice-server"; username="{credential.username}"; '
        f'credential="{credential.password}"; credential-type="password"'
    )
