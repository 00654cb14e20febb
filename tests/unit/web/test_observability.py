from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiortc import RTCConfiguration, RTCPeerConnection

from streamer.transport.ice_addresses import restrict_ice_addresses
from tests.fakes_pipeline import fake_binding
from web.app import create_app
from web.app_keys import ENGINE_KEY
from web.daemon_config import DaemonConfig

TOKEN = "observability-token"


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    app = create_app(DaemonConfig(ice_addresses=("127.0.0.1",)), fake_binding)
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        await app[ENGINE_KEY].loaded
        yield test_client


async def test_health_and_ready(client: TestClient) -> None:
    response = await client.get("/health")
    assert response.status == 200 and await response.json() == {"status": "ok"}
    response = await client.get("/ready")
    assert response.status == 200 and await response.json() == {"ready": True}


async def test_metrics_is_prometheus_text_with_model_info(client: TestClient) -> None:
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = await response.text()
    assert "# TYPE livefuse_active_sessions gauge\nlivefuse_active_sessions 0.0\n" in text
    assert 'livefuse_model_info{key="engines",value="fake"} 1.0' in text
    for family in (
        "livefuse_frames_in_total",
        "livefuse_stage_seconds",
        "livefuse_e2e_latency_seconds",
        "livefuse_occluded_faces_total",
        "livefuse_palm_searches_total",
    ):
        assert f"# TYPE {family}" in text


async def test_metrics_answers_openmetrics_when_the_scraper_asks(client: TestClient) -> None:
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    response = await client.get("/metrics", headers={"Accept": accept})
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    text = await response.text()
    assert "# TYPE livefuse_frames_in counter" in text  # OpenMetrics names the family without _total
    assert 'livefuse_model_info{key="engines",value="fake"} 1.0' in text
    assert text.endswith("# EOF\n")


async def test_ready_turns_false_when_the_worker_is_gone(client: TestClient) -> None:
    engine = client.app[ENGINE_KEY]  # type: ignore[index]
    assert engine.worker is not None
    await engine.worker.close()
    response = await client.get("/ready")
    assert response.status == 503
    assert await response.json() == {"ready": False, "reason": "the frame worker is not running"}


async def offer_sdp() -> str:
    restrict_ice_addresses(["127.0.0.1"])
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        pc.addTransceiver("video", direction="sendrecv")
        await pc.setLocalDescription(await pc.createOffer())
        return pc.localDescription.sdp
    finally:
        await pc.close()


async def test_ready_is_503_at_max_sessions_and_200_again_when_one_ends() -> None:
    """A proxy health check or a readiness probe sends new calls elsewhere while this daemon is full; the
    open calls themselves keep working."""
    app = create_app(DaemonConfig(max_sessions=2, ice_addresses=("127.0.0.1",), token=TOKEN), fake_binding)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        await app[ENGINE_KEY].loaded
        ids = []
        for expected in (200, 200, 503):
            response = await client.get("/ready")  # no token: probes and health checks send none
            assert response.status == expected
            if expected == 503:
                body = await response.json()
                assert body == {"ready": False, "reason": "at capacity: all 2 session slots are in use"}
                break
            created = await client.post(
                "/api/sessions", json={"sdp": await offer_sdp(), "type": "offer"}, headers=auth
            )
            assert created.status == 201
            ids.append((await created.json())["id"])
        assert (await client.get(f"/api/sessions/{ids[0]}", headers=auth)).status == 200
        assert (await client.delete(f"/api/sessions/{ids[0]}", headers=auth)).status == 204
        assert (await client.get("/ready")).status == 200
        assert (await client.get("/metrics")).status == 401, "/metrics keeps needing the token"


async def test_ready_is_503_while_draining(client: TestClient) -> None:
    engine = client.app[ENGINE_KEY]  # type: ignore[index]
    engine.draining = True
    response = await client.get("/ready")
    assert response.status == 503 and (await response.json())["reason"].startswith("draining")


async def test_page_is_served(client: TestClient) -> None:
    response = await client.get("/")
    assert response.status == 200 and "<html" in (await response.text()).lower()
