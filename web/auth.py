"""Who may talk to the daemon: bearer-token access control, CORS, TLS, and the audit line per session.

With a token configured (`serve --token` or $LIVEFUSE_TOKEN) every route answers 401 without
`Authorization: Bearer <token>`, except a tiny explicit public set: the page (`GET /`, `/static/*`), the
viewer page's HTML (`GET /view/{id}`, one path segment only), `GET /health` and `GET /ready` (probes and
proxy health checks carry no token; /ready says only whether a new call is welcome). The decision is made
on the route that matched, never on string prefixes of the raw path, and unknown paths are 401 too (no
route probing without the token). The token is compared in constant time (hmac.compare_digest of sha256
digests, so its length does not leak either); logs and audit lines carry only its id, the first 8 hex of
its sha256. CORS is off (no headers at all) unless origins are listed; then only those origins get CORS
headers, and their preflights are answered here, before the token check (browsers send none).
"""

import hashlib
import hmac
import logging
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from aiohttp.web_urldispatcher import StaticResource

from gpu_ops.errors import InvalidInputError
from streamer.outputs.provenance import audit_record, log_audit
from web.app_keys import ENGINE_KEY
from web.client_address import client_address
from web.daemon_config import DaemonConfig
from web.responses import error_response

logger = logging.getLogger(__name__)


TOKEN_ID_KEY = web.RequestKey("token_id", str)
PUBLIC_GET_PATHS = frozenset({"/", "/health", "/ready"})  # probes and health checks send no token
VIEWER_PAGE = re.compile(r"^/view/[^/]+$")  # the viewer's HTML only, never its API below it
CORS_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
CORS_HEADERS = "Authorization, Content-Type, If-Match"
CORS_EXPOSED = "Location, Retry-After, ETag, Link"
CORS_MAX_AGE_S = "600"
REFUSAL_LOG_INTERVAL_S = 10.0


@dataclass(frozen=True)
class AccessPolicy:
    """The access rules of one daemon: an optional bearer token and the CORS origins allowed."""

    token: str | None = None
    cors_origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < 8:
            raise InvalidInputError("the access token must be at least 8 characters")
        for origin in self.cors_origins:
            if origin == "*" or not re.match(r"^https?://[^/\s]+$", origin):
                raise InvalidInputError(
                    f"--cors-origin must be one exact origin like https://host:port, got {origin!r}"
                )


def token_id(token: str) -> str:
    """The token's public name in logs: first 8 hex digits of its sha256."""
    return hashlib.sha256(token.encode()).hexdigest()[:8]


def token_matches(presented: str, expected: str) -> bool:
    """Constant-time comparison (digests first, so unequal lengths take the same time)."""
    presented_digest = hashlib.sha256(presented.encode()).digest()
    expected_digest = hashlib.sha256(expected.encode()).digest()
    return hmac.compare_digest(presented_digest, expected_digest)


def bearer_token(request: web.Request) -> str | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def is_public(request: web.Request) -> bool:
    """True for the few routes anyone may GET: the page and its static files, the viewer page, /health."""
    if request.method not in ("GET", "HEAD"):
        return False
    route = request.match_info.route
    resource = route.resource
    if resource is None or request.match_info.http_exception is not None:
        return False  # unmatched path or method: not public
    if isinstance(resource, StaticResource):
        return True
    canonical = resource.canonical
    return canonical in PUBLIC_GET_PATHS or bool(VIEWER_PAGE.match(canonical))


def _unauthorized(message: str) -> web.Response:
    return error_response(401, message, **{"WWW-Authenticate": 'Bearer realm="livefuse"'})


def auth_middleware(policy: AccessPolicy) -> Middleware:
    """401 for every non-public route without the right bearer token (no-op when no token is set)."""
    expected = policy.token
    last_logged = [0.0]

    @web.middleware
    async def check_token(request: web.Request, handler: Handler) -> web.StreamResponse:
        if expected is None:
            return await handler(request)
        presented = bearer_token(request)
        if presented is not None and token_matches(presented, expected):
            request[TOKEN_ID_KEY] = token_id(expected)
            return await handler(request)
        if is_public(request):
            return await handler(request)
        now = time.monotonic()
        if now - last_logged[0] >= REFUSAL_LOG_INTERVAL_S:  # a scanner must not flood the log
            last_logged[0] = now
            logger.warning(
                "refused %s %s from %s: %s",
                request.method,
                request.path,
                client_address(request),
                "wrong token" if presented else "no token",
                extra={"event": "auth_refused", "remote": client_address(request)},
            )
        return _unauthorized("this daemon needs a bearer token (Authorization: Bearer <token>)")

    return check_token


def cors_middleware(policy: AccessPolicy) -> Middleware:
    """CORS headers for the listed origins only; preflights answered before the token check."""
    allowed = frozenset(policy.cors_origins)

    @web.middleware
    async def apply_cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if not allowed or origin is None:
            return await handler(request)
        is_preflight = request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers
        if origin not in allowed:
            if is_preflight:
                return error_response(403, f"origin {origin} is not allowed")
            return await handler(request)  # no CORS headers: the browser keeps the answer from the page
        if is_preflight:
            response: web.StreamResponse = web.Response(status=204)
            response.headers["Access-Control-Allow-Methods"] = CORS_METHODS
            response.headers["Access-Control-Allow-Headers"] = CORS_HEADERS
            response.headers["Access-Control-Max-Age"] = CORS_MAX_AGE_S
        else:
            response = await handler(request)  # errors are responses by now (limits.json_errors)
            response.headers["Access-Control-Expose-Headers"] = CORS_EXPOSED
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
        return response

    return apply_cors


SessionLookup = Callable[[web.Request, str], tuple[str | None, str | None] | None]


def audit_middleware(lookup: SessionLookup) -> Middleware:
    """One audit line when a session is created (201 + Location, REST or WHIP) and when its source is
    set; `lookup(request, session_id)` gives (source sha256, engine), or None for an unknown session."""

    @web.middleware
    async def audit(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        action = None
        session_id = request.match_info.get("session_id")
        if request.method == "POST" and response.status == 201 and "Location" in response.headers:
            action, session_id = "session_created", response.headers["Location"].rstrip("/").rsplit("/")[-1]
        elif request.method == "PUT" and response.status == 200 and request.path.endswith("/source"):
            action = "source_set"
        if action is None or not session_id:
            return response
        found = lookup(request, session_id)
        sha256, engine = found if found is not None else (None, None)
        log_audit(
            audit_record(
                action,  # type: ignore[arg-type]
                session_id,
                token_id=request.get(TOKEN_ID_KEY),
                remote=client_address(request),
                source_sha256=sha256 if action == "source_set" else None,
                engine=engine,
            )
        )
        return response

    return audit


def session_audit_facts(request: web.Request, session_id: str) -> tuple[str | None, str | None] | None:
    """(source sha256, engine name) of a live session, for its audit line; None when it is unknown."""
    engine = request.app.get(ENGINE_KEY)
    registry = engine.registry if engine is not None else None
    session = registry.get(session_id) if registry is not None else None
    if engine is None or session is None:
        return None
    sha256 = session.source_info.sha256 if session.source_info is not None else None
    engine_name = str(getattr(session.settings, "engine", "unknown"))
    if engine_name == "auto" and engine.binding is not None:
        engine_name = engine.binding.pipeline.describe().get("default_engine", engine_name)
    return sha256, engine_name


def access_middlewares(config: DaemonConfig) -> list[Middleware]:
    """CORS (outermost: even a 401 carries it), then the token check, then the audit line."""
    policy = AccessPolicy(config.token, config.cors_origins)
    return [cors_middleware(policy), auth_middleware(policy), audit_middleware(session_audit_facts)]


def tls_context(cert_path: str | Path, key_path: str | Path) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2+) from PEM files; InvalidInputError naming what is wrong."""
    for label, path in (("certificate", cert_path), ("key", key_path)):
        if not Path(path).is_file():
            raise InvalidInputError(f"TLS {label} file not found: {path}")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(cert_path), str(key_path))
    except (ssl.SSLError, ValueError) as error:
        raise InvalidInputError(
            f"cannot use TLS certificate {cert_path} with key {key_path}: {error}"
        ) from None
    return context
