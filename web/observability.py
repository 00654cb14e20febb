"""Liveness, readiness and Prometheus metrics. `/health` touches nothing but the loop, so it answers
within milliseconds however busy the worker is."""

from aiohttp import web

from web.app_keys import ENGINE_KEY, METRICS_KEY

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def ready(request: web.Request) -> web.Response:
    engine = request.app.get(ENGINE_KEY)
    is_ready = engine is not None and engine.ready and not engine.draining  # a draining daemon takes no calls
    return web.json_response({"ready": is_ready}, status=200 if is_ready else 503)


async def metrics(request: web.Request) -> web.Response:
    daemon_metrics = request.app[METRICS_KEY]
    engine = request.app.get(ENGINE_KEY)
    sessions = engine.registry if engine is not None else None
    daemon_metrics.active_sessions.set(len(sessions) if sessions is not None else 0)
    response = web.Response(text=daemon_metrics.registry.render())
    response.headers["Content-Type"] = PROMETHEUS_CONTENT_TYPE
    return response


def add_routes(app: web.Application) -> None:
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics)
