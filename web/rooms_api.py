"""Room jobs on the daemon: `POST /api/rooms` starts a worker that swaps one feed of a Janus VideoRoom
and publishes the result into the room (streamer/sfu/room_worker.py); `GET /api/rooms`, `GET` and
`DELETE /api/rooms/{id}`. Behind the token like every /api route; several jobs per daemon, each an
ordinary session of the registry (so /ready's capacity counts them).

Body of the POST (JSON): `janus` (the Janus HTTP API URL), `room` (number), `feed` (number) or `display`
(a publisher's display name), `source` (the face image, base64), and when the room or Janus asks for
them `pin`, `secret` (Janus's API secret) and `janus_token`. None of the last three is ever logged or
returned.

Errors: 400 a bad body, 413 / 415 a source image too large / not an image, 403 a wrong pin, 404 no such room or feed, 422 a feed without video or
a source without a face, 502 Janus down or refusing, 503 models loading or no session slot left.
"""

import asyncio
import base64
import binascii
import hashlib
import logging
import secrets
import urllib.parse
from typing import Any

from aiohttp import web

from gpu_ops.errors import InvalidInputError
from streamer.pipeline.image_input import ImageTooLargeError, UnsupportedImageError, decode_image
from streamer.pipeline.swap_engines.base import NoFaceError
from streamer.realtime.session_registry import SessionLimitError
from streamer.sfu.janus_api import JanusAuth, JanusError, JanusUnreachable
from streamer.sfu.room_worker import RoomJob, RoomWorker
from streamer.sfu.videoroom import RoomError
from web.app_keys import CONFIG_KEY
from web.daemon_config import DaemonConfig
from web.limits import room_body_cap
from web.responses import RETRY_AFTER_S, error_response
from web.signaling import ready_registry

logger = logging.getLogger(__name__)

ROOM_ERROR_STATUS = {"room": 404, "feed": 404, "pin": 403, "video": 422}


class RoomJobs:
    """The daemon's room workers by id; `close()` ends them all (before the engine closes)."""

    def __init__(self) -> None:
        self.workers: dict[str, RoomWorker] = {}

    async def close(self) -> None:
        workers, self.workers = list(self.workers.values()), {}
        for worker in workers:
            await worker.close()


ROOM_JOBS_KEY = web.AppKey("room_jobs", RoomJobs)


def _text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{key!r} must be a non-empty string")
    return value


def _number(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInputError(f"{key!r} must be a positive whole number")
    return value


def check_janus_url(url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InvalidInputError(f"the Janus URL must be http(s)://HOST[:PORT]/janus, got {url!r}")
    return url.rstrip("/")


def job_from_body(body: Any, config: DaemonConfig) -> RoomJob:
    """The RoomJob a POST asks for; InvalidInputError (a 400) naming what is wrong."""
    if not isinstance(body, dict):
        raise InvalidInputError("the body must be a JSON object")
    janus, room = _text(body, "janus"), _number(body, "room")
    if janus is None or room is None:
        raise InvalidInputError("'janus' (the Janus API URL) and 'room' are required")
    feed_id, display = _number(body, "feed"), _text(body, "display")
    if (feed_id is None) == (display is None):
        raise InvalidInputError("name the feed by 'feed' (its id) or by 'display' (its name), one of them")
    encoded = _text(body, "source")
    if encoded is None:
        raise InvalidInputError("'source' (the face image, base64) is required")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputError("'source' is not base64") from None
    image = decode_image(data, max_bytes=config.max_upload_bytes, max_pixels=config.max_upload_pixels)
    auth = JanusAuth(api_secret=_text(body, "secret"), token=_text(body, "janus_token"))
    return RoomJob(
        check_janus_url(janus),
        room,
        image,
        hashlib.sha256(data).hexdigest(),
        feed_id=feed_id,
        display=display,
        pin=_text(body, "pin"),
        auth=auth,
    )


def start_error_response(error: Exception) -> web.Response:
    """The answer to a room job that could not start (shared with nothing else: one mapping)."""
    if isinstance(error, RoomError):
        return error_response(ROOM_ERROR_STATUS.get(error.kind, 400), str(error))
    if isinstance(error, JanusUnreachable):
        return error_response(502, f"Janus unreachable: {error}")
    if isinstance(error, JanusError):
        return error_response(502, f"Janus refused: {error}")
    if isinstance(error, NoFaceError):
        return error_response(422, f"source: {error}")
    if isinstance(error, SessionLimitError):
        return error_response(503, str(error), **{"Retry-After": RETRY_AFTER_S})
    raise error


async def post_room(request: web.Request) -> web.Response:
    registry = ready_registry(request.app)
    if registry is None:
        return error_response(503, "models are still loading", **{"Retry-After": RETRY_AFTER_S})
    config = request.app[CONFIG_KEY]
    try:
        body = await request.clone(client_max_size=room_body_cap(config.max_upload_bytes)).json()
    except ValueError:
        return error_response(400, "the body must be JSON")
    try:  # off the loop: the source photo is decoded here
        job = await asyncio.to_thread(job_from_body, body, config)
    except ImageTooLargeError as error:
        return error_response(413, f"source: {error}")
    except UnsupportedImageError as error:
        return error_response(415, f"source: {error}")
    except InvalidInputError as error:
        return error_response(400, str(error))
    job_id = secrets.token_hex(6)
    worker = RoomWorker(job_id, job, registry, config.ice.rtc_configuration)
    try:
        await worker.start()
    except (RoomError, JanusError, JanusUnreachable, NoFaceError, SessionLimitError) as error:
        await worker.close()
        logger.info("room job refused: %s", error, extra={"event": "room_refused", "room": job.room})
        return start_error_response(error)
    request.app[ROOM_JOBS_KEY].workers[job_id] = worker
    headers = {"Location": config.location(f"/api/rooms/{job_id}")}
    return web.json_response(worker.describe(), status=201, headers=headers)


def _worker(request: web.Request) -> RoomWorker:
    worker = request.app[ROOM_JOBS_KEY].workers.get(request.match_info["job_id"])
    if worker is None:
        raise web.HTTPNotFound(text=f"no room job {request.match_info['job_id']!r}")
    return worker


async def list_rooms(request: web.Request) -> web.Response:
    return web.json_response([worker.describe() for worker in request.app[ROOM_JOBS_KEY].workers.values()])


async def get_room(request: web.Request) -> web.Response:
    return web.json_response(_worker(request).describe())


async def delete_room(request: web.Request) -> web.Response:
    worker = _worker(request)
    request.app[ROOM_JOBS_KEY].workers.pop(worker.job_id, None)
    await worker.close()
    return web.Response(status=204)


def add_routes(app: web.Application) -> None:
    """Routes and a cleanup that ends the room jobs before the engine (added after the engine's)."""
    app[ROOM_JOBS_KEY] = jobs = RoomJobs()

    async def close_jobs(app: web.Application):  # type: ignore[no-untyped-def]
        yield
        await jobs.close()

    app.cleanup_ctx.append(close_jobs)
    app.router.add_post("/api/rooms", post_room)
    app.router.add_get("/api/rooms", list_rooms)
    app.router.add_get("/api/rooms/{job_id}", get_room)
    app.router.add_delete("/api/rooms/{job_id}", delete_room)
