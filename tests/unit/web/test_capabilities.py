"""`GET /api/capabilities` and the 409 for a settings change asking for something unavailable, against
the real app with the fake pipeline: the refused change leaves the session and its settings as they were."""

from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from streamer.pipeline.capabilities import Capabilities
from tests.fakes_pipeline import FakePipeline, fake_binding
from tests.unit.web.test_signaling import _open_session
from web.app import create_app
from web.app_keys import ENGINE_KEY
from web.daemon_config import DaemonConfig

TOKEN = "capabilities-test-token"
NO_INSWAPPER = "the inswapper engine needs inswapper_128: fix: models fetch inswapper_128"
NO_ENHANCER = "the enhancer runs on the inswapper engine, which is not available here"


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    pipeline = FakePipeline(unavailable={"inswapper": NO_INSWAPPER, "enhancer": NO_ENHANCER})
    app = create_app(
        DaemonConfig(max_sessions=2, ice_addresses=("127.0.0.1",), token=TOKEN),
        lambda: fake_binding(pipeline),
    )
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with TestClient(TestServer(app, host="127.0.0.1"), headers=headers) as test_client:
        await app[ENGINE_KEY].loaded
        yield test_client


async def test_capabilities_list_engines_and_features_with_reasons(client: TestClient) -> None:  # type: ignore[type-arg]
    response = await client.get("/api/capabilities")
    assert response.status == 200
    body = await response.json()
    assert body["default_engine"] == "mesh"
    assert body["engines"] == {
        "auto": {"available": True, "reason": None},
        "mesh": {"available": True, "reason": None},
        "inswapper": {"available": False, "reason": NO_INSWAPPER},
    }
    assert body["features"] == {
        "enhancer": {"available": False, "reason": NO_ENHANCER},
        "reference": {"available": True, "reason": None},
    }


async def test_capabilities_need_the_token(client: TestClient) -> None:  # type: ignore[type-arg]
    response = await client.get("/api/capabilities", headers={"Authorization": "Bearer wrong"})
    assert response.status == 401


@pytest.mark.parametrize(
    ("change", "named"),
    [({"engine": "inswapper"}, NO_INSWAPPER), ({"enhancer": True, "swap_enabled": False}, NO_ENHANCER)],
)
async def test_asking_for_an_unavailable_part_is_409_and_the_call_goes_on(
    client: TestClient,  # type: ignore[type-arg]
    change: dict[str, object],
    named: str,
) -> None:
    session_id = await _open_session(client)
    url = f"/api/sessions/{session_id}/settings"
    response = await client.patch(url, json=change)
    assert response.status == 409
    assert named in (await response.json())["error"]
    stats = await (await client.get(f"/api/sessions/{session_id}")).json()
    assert stats["settings"]["engine"] == "auto" and stats["settings"]["enhancer"] is False
    assert stats["settings"]["swap_enabled"] is True  # nothing of the refused change was applied
    for allowed in ({"engine": "mesh"}, {"enhancer": False}, {"face_selector": "reference"}):
        assert (await client.patch(url, json=allowed)).status == 200


def test_refusal_counts_only_what_a_change_turns_on() -> None:
    capabilities = Capabilities.from_reasons(
        ("mesh", "inswapper"), ("enhancer", "reference"), {"reference": "needs dlib"}, "mesh"
    )
    assert capabilities.refusal({"face_selector": "reference"}) == "reference is not available: needs dlib"
    assert capabilities.refusal({"face_selector": "many"}) is None
    assert capabilities.refusal({"engine": "inswapper", "enhancer": True}) is None
    assert capabilities.refusal({"engine": "no-such-engine"}) is None  # left to the settings validation (400)
