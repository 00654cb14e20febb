"""Session REST routes: offer/answer (JSON or application/sdp, WHIP-style 201 + Location, absolute under
--public-url, and ICE server Links), end, source upload, settings (409 for an engine or feature this
daemon cannot run, web/capabilities.py), stats, and client-reported latency.
The contract is the page's: keep them in step.
"""

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from aiohttp import web
from aiortc import RTCSessionDescription

from gpu_ops.errors import InvalidInputError
from models.face import Frame
from streamer.pipeline.image_input import ImageTooLargeError, UnsupportedImageError, decode_image
from streamer.pipeline.swap_engines.base import NoFaceError
from streamer.realtime.peer_session import PeerSession
from streamer.realtime.session_registry import SessionLimitError, SessionRegistry
from web.app_keys import CONFIG_KEY, ENGINE_KEY, METRICS_KEY
from web.ice_servers import offer_answer_headers
from web.limits import check_upload_name
from web.responses import BAD_OFFER_ERRORS, RETRY_AFTER_S, SDP_CONTENT_TYPE, error_response

logger = logging.getLogger(__name__)

IMAGE_CONTENT_TYPES = ("image/jpeg", "image/png", "image/webp")
MAX_LATENCY_SAMPLES = 300


def ready_registry(app: web.Application) -> SessionRegistry | None:
    """The session registry once the models are loaded, else None (routes answer 503/404)."""
    engine = app.get(ENGINE_KEY)
    return engine.registry if engine is not None and engine.ready else None


def _session(request: web.Request) -> PeerSession:
    registry = ready_registry(request.app)
    session_id = request.match_info["session_id"]
    session = registry.get(session_id) if registry is not None else None
    if session is None:
        reason = registry.ended_reason(session_id) if registry is not None else None
        message = f"session {session_id!r} was ended by the server: {reason}" if reason else None
        raise web.HTTPNotFound(
            text=json.dumps({"error": message or f"no session {session_id!r}"}),
            content_type="application/json",
        )
    return session


async def _read_offer(request: web.Request) -> RTCSessionDescription:
    if request.content_type == SDP_CONTENT_TYPE:
        sdp = await request.text()
    else:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"body is not JSON: {error}") from error
        if not isinstance(body, dict) or body.get("type") != "offer" or not isinstance(body.get("sdp"), str):
            raise ValueError('expected JSON {"sdp": "...", "type": "offer"}')
        sdp = body["sdp"]
    if not sdp.strip().startswith("v=0"):
        raise ValueError("the offer is not an SDP session description")
    return RTCSessionDescription(sdp=sdp, type="offer")


async def create_session(request: web.Request) -> web.Response:
    registry = ready_registry(request.app)
    if registry is None:
        return error_response(503, "models are still loading", **{"Retry-After": RETRY_AFTER_S})
    try:
        offer = await _read_offer(request)
        session, answer = await registry.open(offer)
    except SessionLimitError as error:
        return error_response(503, str(error), **{"Retry-After": RETRY_AFTER_S})
    except BAD_OFFER_ERRORS as error:
        return error_response(400, f"bad offer: {error}")
    headers = offer_answer_headers(
        request, f"/api/sessions/{session.session_id}", f"{session.session_id}-client"
    )
    if request.content_type == SDP_CONTENT_TYPE:
        return web.Response(status=201, text=answer.sdp, content_type=SDP_CONTENT_TYPE, headers=headers)
    return web.json_response(
        {"id": session.session_id, "sdp": answer.sdp, "type": answer.type}, status=201, headers=headers
    )


async def delete_session(request: web.Request) -> web.Response:
    registry = ready_registry(request.app)
    if registry is None or not await registry.end(request.match_info["session_id"]):
        return error_response(404, f"no session {request.match_info['session_id']!r}")
    return web.Response(status=204)


async def session_stats(request: web.Request) -> web.Response:
    return web.json_response(_session(request).stats())


async def _read_image_bytes(request: web.Request) -> bytes:
    if request.content_type.startswith("multipart/"):
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if getattr(part, "name", None) == "image":
                check_upload_name(getattr(part, "filename", None))  # web/limits.py: no path-like names
                return bytes(await part.read())  # type: ignore[union-attr]
        raise UnsupportedImageError('multipart body has no "image" field')
    return await request.read()


def _decode_source(data: bytes, max_bytes: int, max_pixels: int) -> tuple[Any, str]:
    return decode_image(data, max_bytes=max_bytes, max_pixels=max_pixels), hashlib.sha256(data).hexdigest()


async def _upload_image(request: web.Request) -> tuple[Frame, str]:
    """The request's image, decoded off the loop under the upload limits."""
    config = request.app[CONFIG_KEY]
    data = await _read_image_bytes(request)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        None, _decode_source, data, config.max_upload_bytes, config.max_upload_pixels
    )


async def _image_route(request: web.Request, apply: Callable[[Frame, str], Awaitable[Any]]) -> web.Response:
    """Shared by source and reference uploads: one error mapping for every bad image."""
    try:
        image, sha256 = await _upload_image(request)
        result = await apply(image, sha256)
    except UnsupportedImageError as error:
        return error_response(415, str(error))
    except ImageTooLargeError as error:
        return error_response(413, str(error))
    except (InvalidInputError, NoFaceError) as error:
        return error_response(422, str(error))
    except web.HTTPRequestEntityTooLarge:
        return error_response(413, f"image is larger than {request.app[CONFIG_KEY].max_upload_bytes} bytes")
    return web.json_response(result)


async def put_source(request: web.Request) -> web.Response:
    session = _session(request)

    async def apply(image: Frame, sha256: str) -> dict[str, Any]:
        return {"source": asdict(await session.set_source(image, sha256))}

    return await _image_route(request, apply)


async def put_reference(request: web.Request) -> web.Response:
    """The face that `face_selector: "reference"` swaps (faces within reference_distance of it)."""
    session = _session(request)

    async def apply(image: Frame, sha256: str) -> dict[str, Any]:
        await session.set_reference(image, sha256)
        return {"reference": {"sha256": sha256, "width": int(image.shape[1]), "height": int(image.shape[0])}}

    return await _image_route(request, apply)


async def delete_reference(request: web.Request) -> web.Response:
    await _session(request).set_reference(None, None)
    return web.Response(status=204)


async def delete_source(request: web.Request) -> web.Response:
    _session(request).clear_source()
    return web.Response(status=204)


async def patch_settings(request: web.Request) -> web.Response:
    session = _session(request)
    try:
        changes = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return error_response(400, "body is not JSON")
    if not isinstance(changes, dict):
        return error_response(400, "expected a JSON object of settings")
    engine = request.app[ENGINE_KEY]
    refusal = engine.binding.pipeline.capabilities().refusal(changes) if engine.binding else None
    if refusal is not None:  # refused before it reaches a frame: the call goes on with its settings
        return error_response(409, refusal)
    try:
        settings = session.update_settings(changes)
    except (ValueError, TypeError) as error:
        return error_response(400, str(error))
    return web.json_response(asdict(settings))


async def post_latency(request: web.Request) -> web.Response:
    """The page's glass-to-glass samples (from frame stamps), for the e2e latency histogram."""
    _session(request)
    try:
        body = await request.json()
        samples = body["samples_ms"]
        if not isinstance(samples, list) or not all(isinstance(s, (int, float)) for s in samples):
            raise TypeError
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        return error_response(400, 'expected JSON {"samples_ms": [number, ...]}')
    histogram = request.app[METRICS_KEY].client_latency_seconds
    for sample in samples[:MAX_LATENCY_SAMPLES]:
        if 0 <= sample < 60_000:
            histogram.observe(sample / 1000.0)
    return web.Response(status=204)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/sessions", create_session)
    app.router.add_get("/api/sessions/{session_id}", session_stats)
    app.router.add_delete("/api/sessions/{session_id}", delete_session)
    app.router.add_put("/api/sessions/{session_id}/source", put_source)
    app.router.add_delete("/api/sessions/{session_id}/source", delete_source)
    app.router.add_put("/api/sessions/{session_id}/reference", put_reference)
    app.router.add_delete("/api/sessions/{session_id}/reference", delete_reference)
    app.router.add_patch("/api/sessions/{session_id}/settings", patch_settings)
    app.router.add_post("/api/sessions/{session_id}/latency", post_latency)
