"""Request limits: body caps by route kind, SDP size and line caps, a per-client rate limit on session
creation, one JSON parse with clear 400s, upload-name checks, JSON error bodies for every 4xx/5xx, and
the idle-session reaper's place in the app.

Caps are checked from Content-Length before anything is read; a body without one is read through a
request clone whose `client_max_size` is the cap, so a chunked upload cannot go past it either. Image
bytes themselves are checked (format by content, 20 MB, 40 megapixels declared) by
`streamer.pipeline.image_input.decode_image` in the upload route.
"""

import json
import logging
import re
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gpu_ops.errors import InvalidInputError
from streamer.realtime.idle_reaper import FIRST_FRAME_TIMEOUT_S, IdleReaper, WatchedSession
from web.app_keys import CONFIG_KEY, ENGINE_KEY
from web.client_address import client_address
from web.daemon_config import DaemonConfig
from web.responses import SDP_CONTENT_TYPE, error_response

logger = logging.getLogger(__name__)


MAX_SDP_BYTES = 64 * 1024  # a browser offer with audio, video and data is about 6 KB
MAX_SDP_LINES = 1000
MAX_JSON_BYTES = 64 * 1024  # settings, latency samples, trickled candidates
MULTIPART_OVERHEAD_BYTES = 64 * 1024
MAX_TRACKED_CLIENTS = 10_000  # rate-limit buckets kept; full (idle) ones are forgotten first
SESSION_CREATION = re.compile(r"^/(api/sessions|api/rooms|whip|whep)(/\{[^/]+\})?$")
ROOM_JOBS = "/api/rooms"
UNSAFE_NAME = re.compile(r"[/\\\x00-\x1f\x7f]|^\.\.?$|^\s*$")


class UnsafeUploadNameError(InvalidInputError):
    """A multipart file name that looks like a path (or holds control characters)."""


def check_upload_name(file_name: str | None) -> None:
    """Refuse path-like upload names; the name is never used for anything, but such a name is an attack."""
    if file_name is None:
        return
    file_name = urllib.parse.unquote(file_name)  # clients may percent-encode the name in the header
    if UNSAFE_NAME.search(file_name) or ".." in file_name or len(file_name) > 255:
        raise UnsafeUploadNameError(f"upload file name {file_name[:80]!r} is not a plain file name")


class RateLimiter:
    """Token buckets per client key: `per_minute` refill, `burst` capacity; clock injected for tests."""

    def __init__(
        self, per_minute: float, burst: int | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if per_minute <= 0:
            raise ValueError(f"rate must be positive, got {per_minute}")
        self.per_second = per_minute / 60.0
        self.burst = float(burst if burst is not None else max(1, round(per_minute / 6)))
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def acquire(self, key: str) -> float:
        """0.0 when `key` may go ahead now (one token spent), else seconds until it may."""
        now = self._clock()
        tokens, at = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.per_second)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            self._forget_full_buckets(now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / self.per_second

    def _forget_full_buckets(self, now: float) -> None:
        if len(self._buckets) <= MAX_TRACKED_CLIENTS:
            return
        refill_s = self.burst / self.per_second
        self._buckets = {key: state for key, state in self._buckets.items() if now - state[1] < refill_s}


@dataclass(frozen=True)
class RequestKind:
    creates_session: bool
    cap_bytes: int


def classify(request: web.Request, max_upload_bytes: int) -> RequestKind:
    resource = request.match_info.route.resource
    canonical = resource.canonical if resource is not None else request.path
    creates = request.method == "POST" and bool(SESSION_CREATION.match(canonical))
    if request.method == "PUT" and canonical.endswith(("/source", "/reference")):
        return RequestKind(False, max_upload_bytes + MULTIPART_OVERHEAD_BYTES)
    if creates and canonical == ROOM_JOBS:  # JSON with the source image in base64 (web/rooms_api.py)
        return RequestKind(True, room_body_cap(max_upload_bytes))
    if creates or request.content_type == SDP_CONTENT_TYPE:
        return RequestKind(creates, MAX_SDP_BYTES)
    return RequestKind(False, MAX_JSON_BYTES)


def room_body_cap(max_upload_bytes: int) -> int:
    """A room job's body: the source image in base64 (4/3 of its bytes) and a few short fields."""
    return max_upload_bytes * 4 // 3 + MULTIPART_OVERHEAD_BYTES


def check_sdp(sdp: str) -> None:
    """ValueError for an SDP that is not worth parsing (the parser itself is aiortc's)."""
    lines = sdp.count("\n") + 1
    if lines > MAX_SDP_LINES:
        raise ValueError(f"the SDP has {lines} lines; the limit is {MAX_SDP_LINES}")


def parse_json_body(body: bytes) -> object:
    """The parsed JSON, or ValueError saying what is wrong (nesting bombs included)."""
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("body is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"body is not valid JSON: {error}") from None
    except RecursionError:
        raise ValueError("JSON is nested too deeply") from None


def request_limits(config: DaemonConfig) -> Middleware:
    """Body caps, SDP checks, JSON validation and the session-creation rate limit."""
    limiter = RateLimiter(config.rate_limit_per_minute) if config.rate_limit_per_minute > 0 else None

    @web.middleware
    async def limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.match_info.http_exception is not None:
            return await handler(request)  # unknown route or method: answered by the router
        kind = classify(request, config.max_upload_bytes)
        if kind.creates_session and limiter is not None:
            wait_s = limiter.acquire(client_address(request) or "unknown")
            if wait_s > 0:
                return error_response(
                    429, "too many new sessions from this address", **{"Retry-After": str(int(wait_s) + 1)}
                )
        if request.content_length is not None and request.content_length > kind.cap_bytes:
            return error_response(413, f"request body is larger than {kind.cap_bytes} bytes")
        if not request.body_exists or kind.cap_bytes > MAX_SDP_BYTES:
            return await handler(request)  # uploads stream through their own caps
        request = request.clone(client_max_size=kind.cap_bytes)
        sdp_only = request.path.startswith(("/whip", "/whep"))  # WHIP/WHEP answer 415 to other types
        try:
            body = await request.read()  # cached: the handler reads the same bytes again
        except web.HTTPRequestEntityTooLarge:
            return error_response(413, f"request body is larger than {kind.cap_bytes} bytes")
        try:
            if request.content_type == SDP_CONTENT_TYPE:
                check_sdp(body.decode("utf-8"))
            elif request.content_type == "application/json" or (kind.creates_session and not sdp_only):
                parsed = parse_json_body(body)
                if kind.creates_session and isinstance(parsed, dict) and isinstance(parsed.get("sdp"), str):
                    check_sdp(parsed["sdp"])
        except UnicodeDecodeError:
            return error_response(400, "the SDP is not UTF-8 text")
        except ValueError as error:
            return error_response(400, str(error))
        return await handler(request)

    return limit


def _message_for(error: web.HTTPException, request: web.Request) -> str:
    if isinstance(error, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(error.allowed_methods))
        return f"method {request.method} is not allowed on {request.path} (allowed: {allowed})"
    if isinstance(error, web.HTTPNotFound) and request.match_info.http_exception is not None:
        return f"no route {request.path}"
    if isinstance(error, web.HTTPRequestEntityTooLarge):
        return "request body is too large"
    text = error.text or error.reason
    return text.removeprefix(f"{error.status}: ") if text else error.reason


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error answers with a JSON body {"error": message}; a handler bug is a logged 500."""
    try:
        response = await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        if error.content_type == "application/json" and error.text:
            return web.Response(
                status=error.status,
                text=error.text,
                content_type="application/json",
                headers=_kept_headers(error),
            )
        return error_response(error.status, _message_for(error, request), **_kept_headers(error))
    except Exception:  # a bug in a handler: log it with the route, answer without details
        logger.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(500, "internal error (logged)")
    return response


def _kept_headers(error: web.HTTPException) -> dict[str, str]:
    return {name: error.headers[name] for name in ("Allow", "Retry-After") if name in error.headers}


async def idle_reaper_context(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: sweeps the engine's sessions for idle ones while the app runs (after the engine's
    own context, so it is closed first)."""
    engine = app[ENGINE_KEY]

    def list_sessions() -> Sequence[WatchedSession]:
        registry = engine.registry
        return registry.sessions() if registry is not None else []

    async def end_session(session_id: str, reason: str) -> bool:
        registry = engine.registry
        return registry is not None and await registry.end(session_id, reason)

    reaper = IdleReaper(
        list_sessions,
        end_session,
        idle_timeout_s=app[CONFIG_KEY].idle_timeout_s,
        first_frame_timeout_s=FIRST_FRAME_TIMEOUT_S,
    )
    reaper.start()
    try:
        yield
    finally:
        await reaper.close()
