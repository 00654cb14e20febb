"""WHIP ingest (RFC 9725): a publisher such as OBS 30+ POSTs an SDP offer to `/whip` and gets `201
Created`, the answer and `Location: /whip/{id}` (absolute under --public-url, so it names this daemon
behind a proxy) with the ICE servers as `Link: rel="ice-server"` headers; DELETE on that location ends
the stream, PATCH carries trickled ICE candidates.

A WHIP stream is an ordinary session of the SessionRegistry (same worker, engine, limits, REST API under
/api/sessions/{id}) whose peer only sends: the answer is recvonly, and the swapped video goes to the
session's viewers (WHEP, the viewer page). When `serve --source FACE.jpg` was given, that face is set as
the new session's source, so a publisher needs no REST call to be swapped (and `--reference-face` its
reference, for `--face-selector reference`).

Trickle: PATCH `application/trickle-ice-sdpfrag` candidates are applied to the session's ICE agent
(aioice uses remote candidates that arrive after the answer; `a=end-of-candidates` is passed on). The
answer already carries all server candidates (aiortc gathers before answering), and a publisher whose
offer has no candidates (OBS) is reached through the peer-reflexive candidates of its own checks.
"""

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from aiortc import RTCIceCandidate, RTCSessionDescription
from aiortc.sdp import SessionDescription, candidate_from_sdp

from gpu_ops.errors import InvalidInputError
from models.face import Frame
from streamer.pipeline.image_input import decode_image
from streamer.pipeline.swap_engines.base import NoFaceError
from streamer.realtime.peer_session import PeerSession
from streamer.realtime.session_registry import SessionLimitError, SessionRegistry
from web.app_keys import CONFIG_KEY
from web.ice_servers import offer_answer_headers
from web.responses import BAD_OFFER_ERRORS, RETRY_AFTER_S, SDP_CONTENT_TYPE, error_response
from web.signaling import ready_registry

logger = logging.getLogger(__name__)

TRICKLE_CONTENT_TYPE = "application/trickle-ice-sdpfrag"
LATEST_ALIAS = "latest"  # /view/latest, /whep/latest: the newest live WHIP stream


class WhipState:
    """The ids of open WHIP sessions, newest last, and the decoded default source and reference (each
    read once): kind ("source", "reference") -> (image, sha256)."""

    def __init__(self) -> None:
        self.session_ids: list[str] = []
        self.defaults: dict[str, tuple[Frame, str]] = {}

    def remember(self, session_id: str, registry: SessionRegistry) -> None:
        """Add `session_id`, forgetting the ids of sessions that have ended since."""
        self.session_ids = [known for known in self.session_ids if registry.get(known) is not None]
        self.session_ids.append(session_id)


WHIP_STATE_KEY = web.AppKey("whip_state", WhipState)


def latest_whip_session(app: web.Application) -> PeerSession | None:
    """The newest WHIP session that is still open (None when there is none)."""
    registry = ready_registry(app)
    if registry is None:
        return None
    for session_id in reversed(app[WHIP_STATE_KEY].session_ids):
        session = registry.get(session_id)
        if session is not None:
            return session
    return None


def parse_sdp_offer(sdp: str) -> RTCSessionDescription:
    """ValueError unless `sdp` looks like an offer aiortc can try (a session description with media)."""
    if not sdp.lstrip().startswith("v=0"):
        raise ValueError("the body is not an SDP session description")
    try:
        media = SessionDescription.parse(sdp).media
    except (AssertionError, ValueError, KeyError, IndexError, TypeError) as error:
        # aiortc's parser reports malformed lines with assert: it must not become a 500
        raise ValueError(f"the offer cannot be parsed ({type(error).__name__} {error})") from None
    if not media:
        raise ValueError("the offer has no media section")
    return RTCSessionDescription(sdp=sdp, type="offer")


def _read_default_image(path: Path, max_bytes: int) -> tuple[Frame, str]:
    data = path.read_bytes()
    return decode_image(data, max_bytes=max_bytes), hashlib.sha256(data).hexdigest()


async def _apply_defaults(app: web.Application, session: PeerSession) -> None:
    """`serve --source` and `--reference-face` on a new WHIP session (each read and decoded once)."""
    config, state = app[CONFIG_KEY], app[WHIP_STATE_KEY]
    for kind, path in (("source", config.default_source), ("reference", config.default_reference)):
        if path is None:
            continue
        try:
            if kind not in state.defaults:
                state.defaults[kind] = await asyncio.to_thread(
                    _read_default_image, path, config.max_upload_bytes
                )
            image, sha256 = state.defaults[kind]
            if kind == "source":
                await session.set_source(image, sha256)
            else:
                await session.set_reference(image, sha256)
        except (OSError, InvalidInputError, NoFaceError) as error:
            # the stream still runs (passed through); source and reference can be set through REST
            logger.warning(
                "session %s: default %s %s not used: %s",
                session.session_id,
                kind,
                path,
                error,
                extra={"session_id": session.session_id, "event": f"default_{kind}_failed"},
            )


async def post_whip(request: web.Request) -> web.Response:
    if request.content_type != SDP_CONTENT_TYPE:
        return error_response(415, f"WHIP offers must be {SDP_CONTENT_TYPE}, not {request.content_type!r}")
    registry = ready_registry(request.app)
    if registry is None:
        return error_response(503, "models are still loading", **{"Retry-After": RETRY_AFTER_S})
    try:
        offer = parse_sdp_offer(await request.text())
        session, answer = await registry.open(offer)
    except SessionLimitError as error:
        return error_response(503, str(error), **{"Retry-After": RETRY_AFTER_S})
    except BAD_OFFER_ERRORS as error:
        return error_response(400, f"bad offer: {error}")
    request.app[WHIP_STATE_KEY].remember(session.session_id, registry)
    await _apply_defaults(request.app, session)  # before the answer: no frame passes unswapped
    logger.info(
        "session %s: WHIP stream answered",
        session.session_id,
        extra={"session_id": session.session_id, "event": "whip_started"},
    )
    headers = offer_answer_headers(
        request, f"/whip/{session.session_id}", f"{session.session_id}-client", ETag=f'"{session.session_id}"'
    )
    return web.Response(status=201, text=answer.sdp, content_type=SDP_CONTENT_TYPE, headers=headers)


def _whip_session(request: web.Request) -> PeerSession | None:
    session_id = request.match_info["session_id"]
    registry = ready_registry(request.app)
    if registry is None or session_id not in request.app[WHIP_STATE_KEY].session_ids:
        return None
    return registry.get(session_id)


async def delete_whip(request: web.Request) -> web.Response:
    session = _whip_session(request)
    registry = ready_registry(request.app)
    if session is None or registry is None or not await registry.end(session.session_id):  # ends all of it
        return error_response(404, f"no WHIP stream {request.match_info['session_id']!r}")
    return web.Response(status=200)


def parse_trickle_fragment(fragment: str) -> list[RTCIceCandidate | None]:
    """The candidates of an `application/trickle-ice-sdpfrag` body (None for end-of-candidates).

    Every candidate goes to m-line 0: aiortc bundles all media on the first transport.
    """
    candidates: list[RTCIceCandidate | None] = []
    for line in fragment.replace("\r\n", "\n").split("\n"):
        line = line.strip()
        if line.startswith("a=candidate:"):
            text = line[len("a=candidate:") :]
            if len(text.split()) < 8:  # aiortc's parser asserts on short lines
                raise ValueError(f"not an ICE candidate: {line!r}")
            candidate = candidate_from_sdp(text)
            candidate.sdpMLineIndex = 0
            candidates.append(candidate)
        elif line == "a=end-of-candidates":
            candidates.append(None)
    return candidates


async def apply_trickle(
    request: web.Request, add_candidate: Callable[[RTCIceCandidate | None], Awaitable[None]]
) -> web.Response:
    """A trickle PATCH (RFC 9725 section 4.3) for WHIP and WHEP alike: check, parse, hand over, 204."""
    if request.content_type != TRICKLE_CONTENT_TYPE:
        return error_response(415, f"PATCH bodies must be {TRICKLE_CONTENT_TYPE}")
    try:
        candidates = parse_trickle_fragment(await request.text())
    except (ValueError, IndexError) as error:
        return error_response(400, f"bad candidate: {error}")
    for candidate in candidates:
        await add_candidate(candidate)
    return web.Response(status=204)


async def patch_whip(request: web.Request) -> web.Response:
    session = _whip_session(request)
    if session is None:
        return error_response(404, f"no WHIP stream {request.match_info['session_id']!r}")
    return await apply_trickle(request, session.add_ice_candidate)


def add_routes(app: web.Application) -> None:
    app[WHIP_STATE_KEY] = WhipState()
    app.router.add_post("/whip", post_whip)
    app.router.add_delete("/whip/{session_id}", delete_whip)
    app.router.add_patch("/whip/{session_id}", patch_whip)
