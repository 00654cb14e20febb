"""The Janus VideoRoom requests a room worker (and the test peers) make, as functions on a handle, and the
plugin's errors turned into the ones a caller can act on (unknown room, wrong pin).

The plugin reports its errors inside `plugindata.data` (`error_code`, `error`) of a successful Janus
answer; `_checked` raises them. Codes from janus_videoroom.c: 426 no such room, 433 unauthorized (pin),
428 no such feed, 429 a missing element (the pin of a room that has one).
"""

from dataclasses import dataclass
from typing import Any

from gpu_ops.errors import LivefuseError
from streamer.sfu.janus_api import JanusError, JanusHandle, Message

NO_SUCH_ROOM = 426
NO_SUCH_FEED = 428
MISSING_ELEMENT = 429
UNAUTHORIZED = 433
SUBSCRIBE_TIMEOUT_S = 15.0  # Janus answers a subscription once the feed's media is set up


class RoomError(LivefuseError):
    """The room refused: `kind` is "room" (no such room), "pin" (wrong or missing pin), "feed" (no such
    feed) or "video" (the feed has no video); `code` is the plugin's error code when it sent one."""

    def __init__(self, kind: str, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.code = code


@dataclass(frozen=True)
class Participant:
    feed_id: int
    display: str
    publishing: bool


def _checked(data: Message, room: int) -> Message:
    code = int(data.get("error_code", 0) or 0)
    if not code:
        return data
    reason = str(data.get("error", "unknown error"))
    if code == NO_SUCH_ROOM:
        raise RoomError("room", f"Janus has no room {room}", code)
    if code == UNAUTHORIZED:
        raise RoomError("pin", f"room {room} refused the pin ({reason})", code)
    if code == MISSING_ELEMENT and "(pin)" in reason:
        raise RoomError("pin", f"room {room} needs a pin", code)
    if code == NO_SUCH_FEED:
        raise RoomError("feed", f"room {room}: {reason}", code)
    raise JanusError(code, reason)


def _event_data(event: Message) -> Message:
    return dict(event.get("plugindata", {}).get("data", {}))


def _with_pin(body: Message, pin: str | None) -> Message:
    return {**body, "pin": pin} if pin else body


async def room_exists(handle: JanusHandle, room: int) -> bool:
    data = await handle.request({"request": "exists", "room": room})
    return bool(_checked(data, room).get("exists"))


async def list_participants(handle: JanusHandle, room: int) -> list[Participant]:
    """Everyone in the room; `publishing` is true once a participant's media is up."""
    data = _checked(await handle.request({"request": "listparticipants", "room": room}), room)
    return [
        Participant(int(entry["id"]), str(entry.get("display", "")), bool(entry.get("publisher")))
        for entry in data.get("participants", [])
    ]


async def join_as_publisher(
    handle: JanusHandle, room: int, display: str, pin: str | None = None, feed_id: int | None = None
) -> Message:
    """Join `room` as a publisher (not yet sending): the `joined` data (its `id`, the `publishers`)."""
    body: Message = {"request": "join", "ptype": "publisher", "room": room, "display": display}
    if feed_id is not None:
        body["id"] = feed_id
    event = await handle.send(_with_pin(body, pin))
    return _checked(_event_data(event), room)


async def publish(handle: JanusHandle, room: int, offer_sdp: str, display: str | None = None) -> str:
    """Publish our offer in the room we joined; the answer's SDP."""
    body: Message = {"request": "publish"}
    if display is not None:
        body["display"] = display
    event = await handle.send(body, jsep={"type": "offer", "sdp": offer_sdp})
    _checked(_event_data(event), room)
    return _answer_sdp(event, "publish")


async def unpublish(handle: JanusHandle, room: int) -> None:
    """Stop publishing (and stay in the room)."""
    event = await handle.send({"request": "unpublish"})
    _checked(_event_data(event), room)


async def subscribe(handle: JanusHandle, room: int, feed_id: int, pin: str | None = None) -> str:
    """Ask for `feed_id`'s media: the offer Janus makes us (answer it with `start`)."""
    body: Message = {"request": "join", "ptype": "subscriber", "room": room, "streams": [{"feed": feed_id}]}
    event = await handle.send(_with_pin(body, pin), timeout=SUBSCRIBE_TIMEOUT_S)
    _checked(_event_data(event), room)
    jsep: Any = event.get("jsep") or {}
    if jsep.get("type") != "offer":
        raise JanusError(0, f"room {room}: subscribing to feed {feed_id} brought no offer")
    return str(jsep["sdp"])


async def start(handle: JanusHandle, room: int, answer_sdp: str) -> None:
    """Answer the subscription's offer: media starts flowing."""
    event = await handle.send({"request": "start"}, jsep={"type": "answer", "sdp": answer_sdp})
    _checked(_event_data(event), room)


def _answer_sdp(event: Message, what: str) -> str:
    jsep: Any = event.get("jsep") or {}
    if jsep.get("type") != "answer":
        raise JanusError(0, f"Janus sent no answer to {what}")
    return str(jsep["sdp"])


def offer_has_video(sdp: str) -> bool:
    """Whether an offer carries a video stream (a port-0 m-line is a refused or absent one)."""
    for line in sdp.splitlines():
        if line.startswith("m=video ") and not line.startswith("m=video 0 "):
            return True
    return False
