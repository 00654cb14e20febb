"""WHEP egress: a player POSTs a recvonly SDP offer to `/whep/{id}` and gets `201 Created`, the answer
and `Location: /whep/{id}/{viewer_id}` (absolute under --public-url) with the ICE servers as
`Link: rel="ice-server"` headers; DELETE on that location ends that viewer only. A session is watched on
the daemon that holds it: behind a proxy, at the base of its WHIP or session Location.

Any session can be watched: a browser call, a WHIP stream, or `latest` (the newest live WHIP stream, so an
OBS Browser Source URL survives OBS restarting its stream). Viewers get the session's swapped video and
its received audio through the session's relay (streamer/realtime/session_outputs.py).

Trickle: PATCH bodies are applied like WHIP's (the answer already carries every server candidate).
"""

import logging
import secrets

from aiohttp import web
from aiortc import RTCIceCandidate

from streamer.realtime.peer_session import PeerSession
from streamer.realtime.session_outputs import ViewerLimitError
from web.app_keys import CONFIG_KEY
from web.ice_servers import offer_answer_headers
from web.responses import BAD_OFFER_ERRORS, RETRY_AFTER_S, SDP_CONTENT_TYPE, error_response
from web.signaling import ready_registry
from web.whip import LATEST_ALIAS, apply_trickle, latest_whip_session, parse_sdp_offer

logger = logging.getLogger(__name__)


def watched_session(app: web.Application, session_id: str) -> PeerSession | None:
    """The session behind `session_id` (or the `latest` alias); None when there is none."""
    if session_id == LATEST_ALIAS:
        return latest_whip_session(app)
    registry = ready_registry(app)
    return registry.get(session_id) if registry is not None else None


async def post_whep(request: web.Request) -> web.Response:
    if request.content_type != SDP_CONTENT_TYPE:
        return error_response(415, f"WHEP offers must be {SDP_CONTENT_TYPE}, not {request.content_type!r}")
    session_id = request.match_info["session_id"]
    session = watched_session(request.app, session_id)
    if session is None:
        return error_response(404, f"no session {session_id!r}")
    ice = request.app[CONFIG_KEY].ice
    try:
        offer = parse_sdp_offer(await request.text())
        rtc_configuration = ice.rtc_configuration(f"{session.session_id}-view-{secrets.token_hex(4)}")
        viewer_id, answer = await session.outputs.add_viewer(offer, rtc_configuration)
    except ViewerLimitError as error:
        return error_response(503, str(error), **{"Retry-After": RETRY_AFTER_S})
    except BAD_OFFER_ERRORS as error:
        return error_response(400, f"bad offer: {error}")
    headers = offer_answer_headers(
        request,
        f"/whep/{session.session_id}/{viewer_id}",
        f"{viewer_id}-client",
        ETag=f'"{viewer_id}"',
        **{"X-Session-Id": session.session_id},
    )
    return web.Response(status=201, text=answer.sdp, content_type=SDP_CONTENT_TYPE, headers=headers)


def _viewer_of(request: web.Request) -> tuple[PeerSession, str] | None:
    session_id, viewer_id = request.match_info["session_id"], request.match_info["viewer_id"]
    session = watched_session(request.app, session_id)
    if session is None or not session.outputs.has_viewer(viewer_id):
        return None
    return session, viewer_id


async def delete_whep(request: web.Request) -> web.Response:
    found = _viewer_of(request)
    if found is None or not await found[0].outputs.remove_viewer(found[1]):
        return error_response(404, f"no viewer {request.match_info['viewer_id']!r}")
    return web.Response(status=200)


async def patch_whep(request: web.Request) -> web.Response:
    found = _viewer_of(request)
    if found is None:
        return error_response(404, f"no viewer {request.match_info['viewer_id']!r}")
    pc = found[0].outputs.viewer_pc(found[1])

    async def add_candidate(candidate: RTCIceCandidate | None) -> None:
        if pc is not None:
            await pc.addIceCandidate(candidate)

    return await apply_trickle(request, add_candidate)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/whep/{session_id}", post_whep)
    app.router.add_delete("/whep/{session_id}/{viewer_id}", delete_whep)
    app.router.add_patch("/whep/{session_id}/{viewer_id}", patch_whep)
