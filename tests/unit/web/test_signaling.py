"""REST contract of the session routes, against the real app with the fake pipeline."""

import asyncio
from collections.abc import AsyncIterator

import cv2
import numpy as np
import pytest
from aiohttp import FormData
from aiohttp.test_utils import TestClient, TestServer
from aiortc import RTCConfiguration, RTCPeerConnection

from streamer.transport.ice_addresses import restrict_ice_addresses
from tests.fakes_pipeline import fake_binding
from web.app import create_app
from web.app_keys import ENGINE_KEY
from web.daemon_config import DaemonConfig

# aiortc's default adds Google's STUN server: test peers stay on loopback (DESIGN.md section 7)
NO_ICE_SERVERS = RTCConfiguration(iceServers=[])


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    app = create_app(DaemonConfig(max_sessions=1, ice_addresses=("127.0.0.1",)), fake_binding)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        await app[ENGINE_KEY].loaded
        yield test_client


async def _offer_sdp() -> str:
    restrict_ice_addresses(["127.0.0.1"])
    pc = RTCPeerConnection(NO_ICE_SERVERS)
    try:
        pc.addTransceiver("video", direction="sendrecv")
        await pc.setLocalDescription(await pc.createOffer())
        return pc.localDescription.sdp
    finally:
        await pc.close()


def _png(image: np.ndarray) -> bytes:
    ok, encoded = cv2.imencode(".png", image)
    assert ok
    return encoded.tobytes()


async def _open_session(client: TestClient) -> str:
    response = await client.post("/api/sessions", json={"sdp": await _offer_sdp(), "type": "offer"})
    assert response.status == 201
    body = await response.json()
    assert body["type"] == "answer" and body["sdp"].startswith("v=0") and "VP8" in body["sdp"]
    assert response.headers["Location"] == f"/api/sessions/{body['id']}"
    return str(body["id"])


async def test_json_offer_then_delete(client: TestClient) -> None:
    session_id = await _open_session(client)
    assert (await client.delete(f"/api/sessions/{session_id}")).status == 204
    assert (await client.delete(f"/api/sessions/{session_id}")).status == 404
    assert (await client.get(f"/api/sessions/{session_id}")).status == 404


async def test_sdp_offer_answers_sdp_with_location(client: TestClient) -> None:
    response = await client.post(
        "/api/sessions", data=await _offer_sdp(), headers={"Content-Type": "application/sdp"}
    )
    assert response.status == 201 and response.content_type == "application/sdp"
    assert (await response.text()).startswith("v=0")
    assert response.headers["Location"].startswith("/api/sessions/")


@pytest.mark.parametrize(
    "body",
    [{"sdp": "hello", "type": "offer"}, {"sdp": "v=0\r\n", "type": "answer"}, {"type": "offer"}, [1, 2]],
)
async def test_bad_offers_are_400_with_a_message(client: TestClient, body: object) -> None:
    response = await client.post("/api/sessions", json=body)
    assert response.status == 400
    assert (await response.json())["error"]


async def test_full_daemon_answers_503_with_retry_after(client: TestClient) -> None:
    await _open_session(client)
    response = await client.post("/api/sessions", json={"sdp": await _offer_sdp(), "type": "offer"})
    assert response.status == 503 and response.headers["Retry-After"]


async def test_source_upload_rules(client: TestClient) -> None:
    session_id = await _open_session(client)
    url = f"/api/sessions/{session_id}/source"
    face = np.random.default_rng(0).integers(0, 256, (64, 48, 3), dtype=np.uint8)
    response = await client.put(url, data=_png(face), headers={"Content-Type": "image/png"})
    assert response.status == 200
    source = (await response.json())["source"]
    assert (source["width"], source["height"]) == (48, 64) and len(source["sha256"]) == 64
    assert (await (await client.get(f"/api/sessions/{session_id}")).json())["has_source"] is True

    faceless = np.full((64, 48, 3), 90, np.uint8)
    response = await client.put(url, data=_png(faceless), headers={"Content-Type": "image/png"})
    assert response.status == 422 and "face" in (await response.json())["error"]
    response = await client.put(url, data=b"plain text", headers={"Content-Type": "image/png"})
    assert response.status == 415

    form = FormData()
    form.add_field("image", _png(face), filename="face.png", content_type="image/png")
    assert (await client.put(url, data=form)).status == 200  # multipart field `image`
    assert (await client.delete(url)).status == 204
    assert (await (await client.get(f"/api/sessions/{session_id}")).json())["has_source"] is False


async def test_settings_patch_validates_and_returns_all_settings(client: TestClient) -> None:
    session_id = await _open_session(client)
    url = f"/api/sessions/{session_id}/settings"
    response = await client.patch(url, json={"enhancer": True, "swap_enabled": False})
    assert response.status == 200
    settings = await response.json()
    assert settings["enhancer"] is True and settings["swap_enabled"] is False and "mouth_mask" in settings
    assert (await client.patch(url, json={"colour": "red"})).status == 400
    assert (await client.patch(url, json={"enhancer": "yes"})).status == 400
    assert settings["occlusion"] is True  # on by default
    response = await client.patch(url, json={"occlusion": False})
    assert response.status == 200 and (await response.json())["occlusion"] is False
    assert (await client.patch(url, json={"occlusion": "off"})).status == 400
    assert (await client.patch(url, data=b"not json")).status == 400
    stats = await (await client.get(f"/api/sessions/{session_id}")).json()
    assert stats["settings"]["enhancer"] is True
    for key in ("frames_in", "frames_out", "frames_dropped", "processing_ms", "fps_in", "fps_out"):
        assert key in stats


async def test_latency_samples_feed_the_e2e_histogram(client: TestClient) -> None:
    session_id = await _open_session(client)
    url = f"/api/sessions/{session_id}/latency"
    assert (await client.post(url, json={"samples_ms": [12.5, 40]})).status == 204
    assert (await client.post(url, json={"samples": 1})).status == 400
    text = await (await client.get("/metrics")).text()
    assert "livefuse_e2e_latency_seconds_count 2" in text


async def test_routes_wait_for_the_models() -> None:
    release = asyncio.Event()
    loop = asyncio.get_running_loop()

    def slow_binding():  # type: ignore[no-untyped-def]
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(5)
        return fake_binding()

    app = create_app(DaemonConfig(ice_addresses=("127.0.0.1",)), slow_binding)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        response = await test_client.post("/api/sessions", json={"sdp": "v=0", "type": "offer"})
        assert response.status == 503 and response.headers["Retry-After"]
        assert (await test_client.get("/ready")).status == 503
        release.set()
        await app[ENGINE_KEY].loaded
        assert (await test_client.get("/ready")).status == 200
