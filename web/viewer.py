"""The viewer page: `GET /view/{id}` serves web/static/view.html, which shows only the swapped video of
session `id` (or `latest`, the newest WHIP stream) full-bleed, for an OBS Browser Source. The page plays
through WHEP and waits for the session itself, so its URL can be set up before the stream starts.
"""

from pathlib import Path

from aiohttp import web

from web.app_keys import CONFIG_KEY

VIEW_PAGE = "view.html"


async def view_page(request: web.Request) -> web.StreamResponse:
    page: Path = request.app[CONFIG_KEY].static_dir / VIEW_PAGE
    if not page.is_file():
        raise web.HTTPNotFound(text=f"the viewer page is not installed (web/static/{VIEW_PAGE})")
    return web.FileResponse(page, headers={"Cache-Control": "no-cache"})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/view/{session_id}", view_page)
