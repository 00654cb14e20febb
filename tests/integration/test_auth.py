"""Access control on the real app: every route the app has (enumerated, so a route added later is
covered without editing this test) is 401 without the token except the tiny public set; with the token a
normal call works; HTTPS with a self-signed certificate; $LIVEFUSE_TOKEN."""

import argparse
import re
import ssl
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.web_urldispatcher import StaticResource

from bench.clients.peer_client import PeerClient
from streamer.pipeline.config_args import config_from_args
from tests.certificates import write_self_signed
from tests.fakes_pipeline import fake_binding
from tests.integration.daemon_harness import LOOPBACK, camera_frame, serving_app
from web.app import create_app
from web.auth import tls_context
from web.daemon_config import DaemonConfig

TOKEN = "correct-horse-battery-staple"
PUBLIC = {("GET", "/"), ("GET", "/health"), ("GET", "/ready"), ("GET", "/view/x"), ("GET", "/static/app.js")}


def _requests_for_every_route(app: web.Application) -> list[tuple[str, str]]:
    """(method, concrete path) for each registered route; placeholders filled with "x"."""
    requests = set()
    for route in app.router.routes():
        resource = route.resource
        assert resource is not None
        if isinstance(resource, StaticResource):
            path = f"{resource.canonical}/app.js"
        else:
            path = re.sub(r"\{[^}]+\}", "x", resource.canonical)
        methods = ("GET", "POST", "PUT", "PATCH", "DELETE") if route.method == "*" else (route.method,)
        for method in methods:
            requests.add(("GET" if method == "HEAD" else method, path))
    return sorted(requests)


def _config(**changes: object) -> DaemonConfig:
    return DaemonConfig(ice_addresses=(LOOPBACK,), idle_timeout_s=3.0, token=TOKEN, **changes)  # type: ignore[arg-type]


async def test_every_route_but_the_public_ones_is_401_without_the_token() -> None:
    app = create_app(_config(), lambda: fake_binding())
    requests = _requests_for_every_route(app)
    paths = {path for _, path in requests}
    assert {"/api/sessions", "/metrics", "/ready", "/api/ice-servers", "/api/sessions/x/source"} <= paths
    assert len(requests) >= 12, requests
    async with serving_app(app) as url, aiohttp.ClientSession() as http:
        for method, path in requests:
            for headers in (
                {},
                {"Authorization": "Bearer not-the-token"},
                {"Authorization": f"Basic {TOKEN}"},
            ):
                async with http.request(method, url + path, headers=headers, data=b"{}") as response:
                    if (method, path) in PUBLIC:
                        assert response.status != 401, (method, path)
                        continue
                    assert response.status == 401, (method, path, headers, response.status)
                    assert "bearer token" in (await response.json())["error"]
        async with http.get(url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}) as response:
            assert response.status == 200


async def test_with_the_token_a_normal_session_swaps_and_without_it_none_opens(media_dir: Path) -> None:
    app = create_app(_config(), lambda: fake_binding())
    frame = camera_frame(media_dir)
    async with serving_app(app) as url:
        with pytest.raises(ConnectionError, match="401"):
            async with PeerClient(url, frame):
                pass
        async with PeerClient(url, frame, token=TOKEN) as client:
            await client.upload_source((media_dir / "fr_biden2.jpg").read_bytes())
            await client.wait_for_frames(10, timeout=10)
            stats = await client.session_stats()
        assert stats["has_source"] and stats["frames_out"] >= 10


async def test_https_with_a_self_signed_certificate(tmp_path: Path) -> None:
    cert_path, key_path = write_self_signed(tmp_path)
    app = create_app(_config(), lambda: fake_binding())
    async with serving_app(app, tls_context(cert_path, key_path)) as url:
        assert url.startswith("https://")
        trusting = ssl.create_default_context(cafile=str(cert_path))
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "/health", ssl=trusting) as response:
                assert response.status == 200
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with http.get(url + "/ready", ssl=trusting, headers=headers) as response:
                assert response.status == 200 and (await response.json()) == {"ready": True}
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with http.get(url + "/health"):  # default trust store: not trusted
                    pass
            with pytest.raises(aiohttp.ClientError):
                async with http.get(url.replace("https://", "http://") + "/health"):
                    pass


def test_token_comes_from_the_flag_else_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIVEFUSE_TOKEN", "from-the-environment")
    assert config_from_args(DaemonConfig, argparse.Namespace()).token == "from-the-environment"
    flagged = config_from_args(DaemonConfig, argparse.Namespace(token="from-the-flag-1"))
    assert flagged.token == "from-the-flag-1"
    monkeypatch.delenv("LIVEFUSE_TOKEN")
    config = config_from_args(DaemonConfig, argparse.Namespace(cors_origin=["https://a.example"], label="AI"))
    assert config.token is None and config.cors_origins == ("https://a.example",)
    assert config.label == "AI"
