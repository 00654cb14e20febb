import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from web.daemon_config import DaemonConfig
from web.limits import (
    MAX_JSON_BYTES,
    MAX_SDP_BYTES,
    MAX_SDP_LINES,
    RateLimiter,
    UnsafeUploadNameError,
    check_sdp,
    check_upload_name,
    json_errors,
    parse_json_body,
    request_limits,
)

OFFER = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rate_limiter_allows_a_burst_then_refuses_with_the_wait_and_refills() -> None:
    clock = Clock()
    limiter = RateLimiter(60, burst=3, clock=clock)
    assert [limiter.acquire("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("a") == pytest.approx(1.0)
    assert limiter.acquire("b") == 0.0  # per client
    clock.now += 1.0
    assert limiter.acquire("a") == 0.0
    assert limiter.acquire("a") > 0


@pytest.mark.parametrize(
    "name",
    [
        "../../etc/passwd",
        "a/b.jpg",
        "..\\x.jpg",
        "..",
        "x\x00.jpg",
        " ",
        "..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fshadow",
        "é" * 300,
    ],
)
def test_path_like_upload_names_are_refused(name: str) -> None:
    with pytest.raises(UnsafeUploadNameError):
        check_upload_name(name)


def test_plain_upload_names_pass() -> None:
    check_upload_name("face.jpg")
    check_upload_name(None)
    check_upload_name("my face (1).png")


def test_json_parse_errors_say_what_is_wrong() -> None:
    assert parse_json_body(b'{"a": 1}') == {"a": 1}
    for body, message in [
        (b"[" * 100_000, "nested too deeply"),
        (b'{"a": ', "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_json_body(body)


def test_sdp_line_cap() -> None:
    check_sdp(OFFER)
    with pytest.raises(ValueError, match="lines"):
        check_sdp("a=x\r\n" * (MAX_SDP_LINES + 1))


async def _echo_json(request: web.Request) -> web.Response:
    return web.json_response({"got": await request.json()}, status=201, headers={"Location": "/x/1"})


async def _echo_sdp(request: web.Request) -> web.Response:
    return web.Response(text=await request.text(), status=201)


async def _boom(request: web.Request) -> web.Response:
    raise KeyError("bug")


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    app = web.Application(middlewares=[json_errors, request_limits(DaemonConfig(rate_limit_per_minute=6))])
    app.router.add_post("/api/sessions", _echo_json)
    app.router.add_post("/whip", _echo_sdp)
    app.router.add_patch("/api/sessions/{session_id}/settings", _echo_json)
    app.router.add_get("/boom", _boom)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


async def test_bodies_over_the_cap_are_413_with_or_without_content_length(client: TestClient) -> None:  # type: ignore[type-arg]
    big = b'{"a": "' + b"x" * MAX_JSON_BYTES + b'"}'
    async with client.patch("/api/sessions/s/settings", data=big) as response:
        assert response.status == 413 and "larger than" in (await response.json())["error"]

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(MAX_SDP_BYTES // 1000 + 2):
            yield b"a=x" * 333 + b"\n"

    headers = {"Content-Type": "application/sdp"}
    async with client.post("/whip", data=chunks(), headers=headers) as response:
        assert response.status == 413


async def test_malformed_json_and_sdp_are_400_with_a_reason(client: TestClient) -> None:  # type: ignore[type-arg]
    json_type = {"Content-Type": "application/json"}
    async with client.patch("/api/sessions/s/settings", data=b"[" * 20_000, headers=json_type) as response:
        assert response.status == 400 and "nested too deeply" in (await response.json())["error"]
    async with client.patch("/api/sessions/s/settings", data=b'{"x":', headers=json_type) as response:
        assert response.status == 400 and "not valid JSON" in (await response.json())["error"]
    many_lines = json.dumps({"type": "offer", "sdp": OFFER + "a=x\r\n" * MAX_SDP_LINES})
    async with client.post("/api/sessions", data=many_lines, headers=json_type) as response:
        assert response.status == 400 and "lines" in (await response.json())["error"]
    async with client.patch("/api/sessions/s/settings", json={"ok": 1}) as response:
        assert response.status == 201 and (await response.json()) == {"got": {"ok": 1}}


async def test_session_creation_is_rate_limited_per_client(client: TestClient) -> None:  # type: ignore[type-arg]
    offer = {"type": "offer", "sdp": OFFER}
    statuses = []
    for _ in range(3):
        async with client.post("/api/sessions", json=offer) as response:
            statuses.append(response.status)
            retry_after = response.headers.get("Retry-After")
    assert statuses == [201, 429, 429]  # 6 a minute: a burst of 1, then one every 10 s
    assert retry_after is not None and 1 <= int(retry_after) <= 11
    async with client.patch("/api/sessions/s/settings", json={}) as response:
        assert response.status == 201  # other routes are not limited


async def test_errors_are_json_unknown_routes_methods_and_handler_bugs(client: TestClient) -> None:  # type: ignore[type-arg]
    async with client.get("/nope") as response:
        assert response.status == 404 and (await response.json()) == {"error": "no route /nope"}
    async with client.get("/whip") as response:
        body = await response.json()
        assert response.status == 405 and "GET is not allowed" in body["error"] and "POST" in body["error"]
        assert "POST" in response.headers["Allow"]
    async with client.get("/boom") as response:
        assert response.status == 500 and (await response.json()) == {"error": "internal error (logged)"}
