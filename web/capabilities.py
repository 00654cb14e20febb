"""`GET /api/capabilities`: which engines and optional features this daemon can run, and why not where it
cannot (the fix named), so the page offers only what works. Behind the token like every /api route;
503 while the models load (the answer depends on which files verified)."""

from aiohttp import web

from web.app_keys import ENGINE_KEY
from web.responses import RETRY_AFTER_S, error_response


async def get_capabilities(request: web.Request) -> web.Response:
    engine = request.app.get(ENGINE_KEY)
    if engine is None or engine.binding is None or not engine.ready:
        return error_response(503, "models are still loading", **{"Retry-After": RETRY_AFTER_S})
    return web.json_response(engine.binding.pipeline.capabilities().as_json())


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/capabilities", get_capabilities)
