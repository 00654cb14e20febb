"""Liveness, readiness and Prometheus metrics. `/health` touches nothing but the loop, so it answers
within milliseconds however busy the worker is. `/ready` says whether this daemon should get a NEW call:
503 while the models load, while draining and at `--max-sessions`, so a proxy's health check or a
Kubernetes readiness probe sends new calls elsewhere; both answer without the token (web/auth.py).
`/metrics` needs it, and answers in OpenMetrics when the scraper's Accept header asks for it."""

from aiohttp import web

from web.app_keys import ENGINE_KEY, METRICS_KEY


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def ready(request: web.Request) -> web.Response:
    engine = request.app.get(ENGINE_KEY)
    reason = engine.unready_reason() if engine is not None else "starting"
    if reason is None:
        return web.json_response({"ready": True})
    return web.json_response({"ready": False, "reason": reason}, status=503)


async def metrics(request: web.Request) -> web.Response:
    daemon_metrics = request.app[METRICS_KEY]
    engine = request.app.get(ENGINE_KEY)
    sessions = engine.registry if engine is not None else None
    daemon_metrics.active_sessions.set(len(sessions) if sessions is not None else 0)
    body, content_type = daemon_metrics.render(request.headers.get("Accept"))
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type  # with its version and charset parameters as they are
    return response


def add_routes(app: web.Application) -> None:
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics)
