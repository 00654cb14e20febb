"""The aiohttp application, assembled: config, metrics and the engine under their keys (web/app_keys.py),
the engine in a cleanup_ctx, middlewares, every route module, and the static page. Models load off the
loop after the server is up; `/ready` turns true when they have.
"""

import logging
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from streamer.realtime.metrics import DaemonMetrics
from streamer.transport.process_patches import TransportPatches
from web import capabilities, ice_servers, observability, rooms_api, signaling, viewer, whep, whip
from web.app_keys import CONFIG_KEY, ENGINE_KEY, METRICS_KEY
from web.auth import access_middlewares
from web.client_address import client_address_middleware
from web.daemon_config import DaemonConfig
from web.engine import DaemonEngine, LoadBinding
from web.limits import idle_reaper_context, json_errors, request_limits

logger = logging.getLogger(__name__)


def create_app(config: DaemonConfig, load_binding: LoadBinding) -> web.Application:
    """The daemon's aiohttp app; the engine starts with the app and is closed on cleanup."""
    app = web.Application(client_max_size=config.max_upload_bytes + 64 * 1024)
    app[CONFIG_KEY] = config
    app[METRICS_KEY] = DaemonMetrics()

    async def engine_context(app: web.Application) -> AsyncIterator[None]:
        # the aiortc latency fixes and ICE rules for the app's life, put back as they were afterwards
        with TransportPatches(config.ice_addresses, config.ice_port_range, config.public_address):
            logger.info(
                "ICE servers: %s; Location headers: %s",
                config.ice.describe(),
                config.public_url or "relative paths (no --public-url)",
                extra={"event": "ice_config"},
            )
            engine = DaemonEngine(config, app[METRICS_KEY], load_binding)
            app[ENGINE_KEY] = engine
            engine.start()
            try:
                yield
            finally:
                await engine.close()

    app.cleanup_ctx.append(engine_context)
    # the client's address behind trusted proxies (web/client_address.py), first, so all below see it;
    # hardening: CORS, token, audit (web/auth.py); JSON errors, body/SDP/rate limits, idle reaper (web/limits.py)
    app.middlewares.extend(
        [
            client_address_middleware(config.trusted_proxies),
            *access_middlewares(config),
            json_errors,
            request_limits(config),
        ]
    )
    app.cleanup_ctx.append(idle_reaper_context)
    observability.add_routes(app)
    signaling.add_routes(app)
    capabilities.add_routes(app)  # what the page may offer
    ice_servers.add_routes(app)
    whip.add_routes(app)  # WHIP ingest, WHEP egress, viewer page
    whep.add_routes(app)
    viewer.add_routes(app)
    rooms_api.add_routes(app)  # room jobs: ended before the engine closes
    _add_static_routes(app, config.static_dir)
    return app


def _add_static_routes(app: web.Application, static_dir: Path) -> None:
    async def index(request: web.Request) -> web.StreamResponse:
        page = static_dir / "index.html"
        if not page.is_file():
            raise web.HTTPNotFound(text="the page is not installed (web/static/index.html)")
        return web.FileResponse(page)

    app.router.add_get("/", index)
    if static_dir.is_dir():
        app.router.add_static("/static", static_dir)
