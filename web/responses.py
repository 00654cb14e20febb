"""The HTTP words every route of the daemon shares: one JSON error shape, the SDP content type, how long a
client waits before trying again, and which exceptions mean "that offer was bad" (a 400, never a 500)."""

from aiohttp import web
from aiortc.exceptions import InternalError, InvalidAccessError, InvalidStateError, OperationError

SDP_CONTENT_TYPE = "application/sdp"
RETRY_AFTER_S = "5"  # Retry-After on a 503 (models loading, at capacity)
# what aiortc and our SDP checks raise on an offer it cannot take (its parser asserts, too: see whip.py)
BAD_OFFER_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    KeyError,
    IndexError,
    InternalError,
    InvalidAccessError,
    InvalidStateError,
    OperationError,
)


def error_response(status: int, message: str, **headers: str) -> web.Response:
    """Every error of the daemon's routes is JSON `{"error": message}`."""
    return web.json_response({"error": message}, status=status, headers=headers or None)
