from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.fakes_pipeline import fake_binding
from web.app import create_app
from web.app_keys import ENGINE_KEY
from web.daemon_config import DaemonConfig


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
    assert "# TYPE livefuse_active_sessions gauge\nlivefuse_active_sessions 0\n" in text
    assert 'livefuse_model_info{key="engines",value="fake"} 1' in text
    for family in ("livefuse_frames_in_total", "livefuse_stage_seconds", "livefuse_e2e_latency_seconds"):
        assert f"# TYPE {family}" in text


async def test_ready_turns_false_when_the_worker_is_gone(client: TestClient) -> None:
    engine = client.app[ENGINE_KEY]  # type: ignore[index]
    assert engine.worker is not None
    await engine.worker.close()
    response = await client.get("/ready")
    assert response.status == 503 and await response.json() == {"ready": False}


async def test_page_is_served(client: TestClient) -> None:
    response = await client.get("/")
    assert response.status == 200 and "<html" in (await response.text()).lower()
