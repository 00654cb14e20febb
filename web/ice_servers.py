"""The daemon's STUN/TURN servers handed to its clients: `GET /api/ice-servers` for the page (the
RTCConfiguration `iceServers` list, with a fresh TURN credential), and `Link: <URL>; rel="ice-server"`
headers on every 201 that answers an offer (sessions, WHIP, WHEP; RFC 9725 section 4.6), for WHIP and
WHEP clients such as OBS. Both need the token when one is set: a TURN credential is a relay on our
server. Responses carrying credentials are never cached.
"""

import secrets

from aiohttp import web
from multidict import CIMultiDict

from streamer.transport.ice_servers import IceServerPlan
from web.app_keys import CONFIG_KEY

NO_STORE = {"Cache-Control": "no-store"}


def ice_server_links(plan: IceServerPlan, client_id: str) -> list[str]:
    """One Link value per URL; TURN ones carry the client's credential (RFC 9725 section 4.6)."""
    links = []
    for server in plan.client_servers(client_id):
        for url in server.urls:
            link = f'<{url}>; rel="ice-server"'
            if server.username is not None:
                link += (
                    f'; username="{server.username}"; credential="{server.credential}"'
                    '; credential-type="password"'
                )
            links.append(link)
    return links


def offer_answer_headers(
    request: web.Request, location_path: str, client_id: str, **more: str
) -> CIMultiDict[str]:
    """Headers of a 201 that answers an offer: Location (under --public-url when set), the ICE server
    Links for `client_id`, and `more`."""
    config = request.app[CONFIG_KEY]
    headers: CIMultiDict[str] = CIMultiDict(Location=config.location(location_path), **more)
    links = ice_server_links(config.ice, client_id)
    for link in links:
        headers.add("Link", link)
    if links and config.ice.turn_secret is not None:
        headers.update(NO_STORE)
    return headers


async def get_ice_servers(request: web.Request) -> web.Response:
    """`{"iceServers": [...], "expiresAt": unix seconds or null}` for one new call."""
    plan = request.app[CONFIG_KEY].ice
    client_id = f"web-{secrets.token_hex(6)}"
    servers = plan.client_servers(client_id)
    credential_expiry = next(
        (int(server.username.split(":", 1)[0]) for server in servers if server.username is not None), None
    )
    body = {"iceServers": [server.as_json() for server in servers], "expiresAt": credential_expiry}
    return web.json_response(body, headers=NO_STORE)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/api/ice-servers", get_ice_servers)
