import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gpu_ops.errors import InvalidInputError
from web.auth import (
    AccessPolicy,
    access_middlewares,
    tls_context,
    token_id,
    token_matches,
)
from web.daemon_config import DaemonConfig
from web.limits import json_errors

TOKEN = "s3cret-token-value"
ORIGIN = "https://studio.example:8443"


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _created(request: web.Request) -> web.Response:
    return web.json_response({"id": "abc"}, status=201, headers={"Location": "/api/sessions/abc"})


def _app(config: DaemonConfig, static_dir: Path) -> web.Application:
    app = web.Application(middlewares=[*access_middlewares(config), json_errors])
    app.router.add_get("/", _ok)
    app.router.add_get("/health", _ok)
    app.router.add_get("/ready", _ok)
    app.router.add_get("/metrics", _ok)
    app.router.add_get("/view/{session_id}", _ok)
    app.router.add_post("/view/{session_id}", _ok)
    app.router.add_get("/view/{session_id}/state", _ok)
    app.router.add_post("/api/sessions", _created)
    app.router.add_static("/static", static_dir)
    return app


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[TestClient]:  # type: ignore[type-arg]
    (tmp_path / "app.js").write_text("// page")
    config = DaemonConfig(token=TOKEN, cors_origins=(ORIGIN,))
    async with TestClient(TestServer(_app(config, tmp_path))) as test_client:
        yield test_client


def test_token_id_is_the_first_8_hex_of_its_sha256_and_compare_is_exact() -> None:
    assert token_id("abc") == "ba7816bf"
    assert token_matches(TOKEN, TOKEN)
    assert not token_matches(TOKEN + "x", TOKEN) and not token_matches("", TOKEN)


@pytest.mark.parametrize("path", ["/", "/health", "/ready", "/view/abc", "/static/app.js"])
async def test_public_pages_answer_without_the_token(client: TestClient, path: str) -> None:  # type: ignore[type-arg]
    async with client.get(path) as response:
        assert response.status == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/metrics"),
        ("POST", "/api/sessions"),
        ("POST", "/view/abc"),  # the viewer page is public for GET only
        ("GET", "/view/abc/state"),  # and only the page itself, not what is below it
        ("GET", "/no/such/route"),  # no route probing without the token
        ("GET", "/static/../metrics"),
        ("DELETE", "/health"),
    ],
)
async def test_everything_else_is_401_without_or_with_a_wrong_token(
    client: TestClient,  # type: ignore[type-arg]
    method: str,
    path: str,
) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong-token-value"}, {"Authorization": TOKEN}):
        async with client.request(method, path, headers=headers) as response:
            assert response.status == 401, (method, path, headers)
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
            assert "bearer token" in (await response.json())["error"]


async def test_the_right_token_opens_every_route(client: TestClient) -> None:  # type: ignore[type-arg]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with client.get("/metrics", headers=headers) as response:
        assert response.status == 200
    async with client.get("/no/such/route", headers=headers) as response:
        assert response.status == 404 and "no route" in (await response.json())["error"]


async def test_session_creation_writes_an_audit_line_with_the_token_id(
    client: TestClient,  # type: ignore[type-arg]
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="streamer.outputs.provenance"):
        async with client.post("/api/sessions", headers={"Authorization": f"Bearer {TOKEN}"}) as response:
            assert response.status == 201
    (entry,) = [record for record in caplog.records if getattr(record, "event", None) == "audit"]
    assert entry.action == "session_created" and entry.session_id == "abc"  # type: ignore[attr-defined]
    assert entry.token_id == token_id(TOKEN) and entry.remote == "127.0.0.1"  # type: ignore[attr-defined]
    assert TOKEN not in caplog.text


async def test_cors_preflight_and_headers_only_for_the_listed_origin(client: TestClient) -> None:  # type: ignore[type-arg]
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    async with client.options("/api/sessions", headers=preflight) as response:
        assert response.status == 204
        assert response.headers["Access-Control-Allow-Origin"] == ORIGIN
        assert "Authorization" in response.headers["Access-Control-Allow-Headers"]
    async with client.options(
        "/api/sessions", headers={**preflight, "Origin": "https://evil.example"}
    ) as response:
        assert response.status == 403 and "Access-Control-Allow-Origin" not in response.headers
    async with client.get("/metrics", headers={"Origin": ORIGIN}) as response:
        assert response.status == 401 and response.headers["Access-Control-Allow-Origin"] == ORIGIN
    async with client.get("/health", headers={"Origin": "https://evil.example"}) as response:
        assert response.status == 200 and "Access-Control-Allow-Origin" not in response.headers


async def test_without_token_or_origins_nothing_is_added(tmp_path: Path) -> None:
    async with TestClient(TestServer(_app(DaemonConfig(), tmp_path))) as open_client:
        async with open_client.get("/metrics", headers={"Origin": ORIGIN}) as response:
            assert response.status == 200
            assert not any(name.startswith("Access-Control") for name in response.headers)
        preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
        async with open_client.options("/api/sessions", headers=preflight) as response:
            assert response.status == 405 and "Access-Control-Allow-Origin" not in response.headers


@pytest.mark.parametrize(
    "policy", [{"token": "short"}, {"cors_origins": ("*",)}, {"cors_origins": ("https://a.example/path",)}]
)
def test_weak_tokens_and_wildcard_origins_are_refused(policy: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        AccessPolicy(**policy)  # type: ignore[arg-type]


def test_tls_context_names_the_missing_or_bad_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="certificate file not found"):
        tls_context(tmp_path / "none.pem", tmp_path / "key.pem")
    (tmp_path / "cert.pem").write_text("not a certificate")
    (tmp_path / "key.pem").write_text("not a key")
    with pytest.raises(InvalidInputError, match="cannot use TLS certificate"):
        tls_context(tmp_path / "cert.pem", tmp_path / "key.pem")
