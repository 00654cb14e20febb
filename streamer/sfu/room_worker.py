"""One room job: the daemon as a participant of a Janus VideoRoom that swaps one feed and publishes the
result as "NAME (swapped)" into the same room, with the feed's audio passed through.

Why this shape:
- The feed comes in as an ordinary session of the SessionRegistry: Janus's subscription offer is answered
  like a WHIP publisher's (recvonly), so the feed is swapped in the same batch worker as every direct call
  and WHIP stream, counts against the same session limit, and shows in /api/sessions. Its swapped video
  and received audio leave through the session's relay (SessionOutputs), which a second peer connection
  publishes into the room: Janus fans it out to every viewer, the daemon encodes it once.
- It follows the publisher by polling `listparticipants` (POLL_S): a feed that stops publishing (or a
  session that ended, no video for a while) is left, both handles detached, so the swapped feed vanishes
  from the room; a feed that publishes again (by id, or by display name under a new id) is picked up.
- Janus going away (the long poll fails, a request is refused with "no such session") drops everything
  on this side; the job keeps trying to make a new Janus session every RETRY_S, so after a Janus restart
  it is back as soon as the feed is.
- Errors a caller can fix (no such room, wrong pin, no such feed, a feed without video, Janus down) are
  raised by `start()`, before the job is accepted; later they only change the job's `state`.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from models.face import Frame
from streamer.realtime.peer_session import PeerSession
from streamer.realtime.session_registry import SessionLimitError, SessionRegistry
from streamer.sfu import videoroom
from streamer.sfu.janus_api import JanusAuth, JanusError, JanusHandle, JanusSession, JanusUnreachable
from streamer.sfu.videoroom import Participant, RoomError
from streamer.transport.codec_tuning import prefer_codec
from streamer.transport.peer_close import close_peer

logger = logging.getLogger(__name__)

POLL_S = 0.25  # how often the room's participants are read (leave within 2 s of an unpublish)
RETRY_S = 0.5  # how often a lost Janus is tried again
PUBLISHING_WAIT_S = 10.0  # start(): how long a feed that joined may take to publish its media
SWAPPED_SUFFIX = " (swapped)"


@dataclass(frozen=True)
class RoomJob:
    """What to swap where. `auth` and `pin` are never logged or shown."""

    janus_url: str
    room: int
    source: Frame
    source_sha256: str
    feed_id: int | None = None
    display: str | None = None
    pin: str | None = field(default=None, repr=False)
    auth: JanusAuth = field(default_factory=JanusAuth)

    def __post_init__(self) -> None:
        if (self.feed_id is None) == (self.display is None):
            raise ValueError("a room job names its feed by id or by display name (one of them)")

    def wants(self, participant: Participant, own_feed: int | None) -> bool:
        if participant.feed_id == own_feed:
            return False
        if self.feed_id is not None:
            return participant.feed_id == self.feed_id
        return participant.display == self.display

    def describe(self) -> dict[str, Any]:
        return {
            "janus": self.janus_url,
            "room": self.room,
            "feed": self.feed_id,
            "display": self.display,
            "source_sha256": self.source_sha256,
        }


class _Link:
    """The live half of a job: the subscription (a registry session) and our publishing peer."""

    def __init__(self, feed: Participant, subscriber: JanusHandle, session: PeerSession) -> None:
        self.feed = feed
        self.subscriber = subscriber
        self.session = session
        self.publisher: JanusHandle | None = None
        self.pc: RTCPeerConnection | None = None
        self.published_id: int | None = None


class RoomWorker:
    """`await start()` joins (raising RoomError / JanusError / JanusUnreachable for bad input), then a
    task follows the feed until `close()` (idempotent)."""

    def __init__(
        self,
        job_id: str,
        job: RoomJob,
        registry: SessionRegistry,
        rtc_configuration: Callable[[str], RTCConfiguration] | None = None,
    ) -> None:
        self.job_id = job_id
        self.job = job
        self._registry = registry
        self._rtc_configuration = rtc_configuration or (lambda name: RTCConfiguration(iceServers=[]))
        self._janus: JanusSession | None = None
        self._control: JanusHandle | None = None
        self._link: _Link | None = None
        self._follower: asyncio.Task[None] | None = None
        self._closed = False
        self.state = "starting"
        self.last_error: str | None = None
        self.joins = 0
        self.started_at = time.time()
        self._extra = {"room_job": job_id}

    # -- life ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._connect()
            assert self._control is not None
            if not await videoroom.room_exists(self._control, self.job.room):
                raise RoomError("room", f"Janus has no room {self.job.room}")
            feed = await self._wait_publishing()
            await self._join(feed)
        except BaseException:
            await self._drop_janus()
            raise
        self._follower = asyncio.create_task(self._follow(), name=f"room-{self.job_id}")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._follower is not None:
            self._follower.cancel()
            await asyncio.gather(self._follower, return_exceptions=True)
        await self._drop_janus()
        self.state = "closed"
        logger.info("room job %s: closed", self.job_id, extra={**self._extra, "event": "room_closed"})

    def describe(self) -> dict[str, Any]:
        link = self._link
        return {
            "id": self.job_id,
            **self.job.describe(),
            "state": self.state,
            "error": self.last_error,
            "joins": self.joins,
            "feed_id": link.feed.feed_id if link else None,
            "feed_display": link.feed.display if link else None,
            "published_id": link.published_id if link else None,
            "session": link.session.stats() if link else None,
        }

    # -- Janus session ------------------------------------------------------------------------------

    async def _connect(self) -> None:
        self._janus = await JanusSession.create(self.job.janus_url, self.job.auth)
        self._control = await self._janus.attach()

    async def _drop_janus(self) -> None:
        await self._leave()
        janus, self._janus, self._control = self._janus, None, None
        if janus is not None:
            await janus.close()

    async def _participant(self) -> Participant | None:
        return (await self._read_room())[0]

    async def _read_room(self) -> tuple[Participant | None, bool]:
        """The feed (None when it is not in the room) and whether our swapped feed is still there."""
        assert self._control is not None
        own = self._link.published_id if self._link else None
        feed, own_present = None, False
        for participant in await videoroom.list_participants(self._control, self.job.room):
            own_present = own_present or participant.feed_id == own
            if feed is None and self.job.wants(participant, own):
                feed = participant
        return feed, own_present

    async def _wait_publishing(self) -> Participant:
        deadline = time.monotonic() + PUBLISHING_WAIT_S
        while True:
            feed = await self._participant()
            if feed is None:
                wanted = self.job.feed_id if self.job.feed_id is not None else repr(self.job.display)
                raise RoomError("feed", f"room {self.job.room} has no feed {wanted}")
            if feed.publishing:
                return feed
            if time.monotonic() > deadline:
                raise RoomError("video", f"feed {feed.feed_id} of room {self.job.room} publishes no media")
            await asyncio.sleep(POLL_S)

    # -- following the feed -------------------------------------------------------------------------

    async def _follow(self) -> None:
        while not self._closed:
            try:
                await self._follow_once()
            except JanusUnreachable as error:
                if self.state != "janus_down":
                    logger.warning(
                        "room job %s: Janus lost: %s",
                        self.job_id,
                        error,
                        extra={**self._extra, "event": "janus_lost"},
                    )
                self.state, self.last_error = "janus_down", str(error)
                await self._drop_janus()
                await asyncio.sleep(RETRY_S)
                continue
            except (RoomError, JanusError, SessionLimitError) as error:  # SessionLimitError: full, draining
                self.state, self.last_error = "error", str(error)
                await self._leave()
            except Exception:  # a bug here must not end the daemon's other jobs; logged, retried
                logger.exception("room job %s: follow step failed", self.job_id, extra=self._extra)
                self.state, self.last_error = "error", "internal error (see the daemon log)"
                await self._drop_janus()
            await asyncio.sleep(POLL_S)

    async def _follow_once(self) -> None:
        if self._janus is None or self._janus.lost.is_set():
            await self._drop_janus()
            await self._connect()
        feed, own_present = await self._read_room()
        link = self._link
        if link is not None:
            ended = self._registry.get(link.session.session_id) is None
            gone = feed is None or not feed.publishing or feed.feed_id != link.feed.feed_id
            if gone or ended or not own_present:  # not own_present: Janus removed our feed (kicked)
                why = "session ended" if ended else "feed unpublished" if gone else "our feed was removed"
                logger.info(
                    "room job %s: leaving (%s)", self.job_id, why, extra={**self._extra, "event": "room_left"}
                )
                await self._leave()
        if self._link is None:
            if feed is not None and feed.publishing:
                await self._join(feed)
            else:
                self.state, self.last_error = "waiting", None

    async def _join(self, feed: Participant) -> None:
        """Subscribe to `feed` (a registry session swaps it) and publish the swapped result."""
        assert self._janus is not None
        subscriber = await self._janus.attach()
        offer = await videoroom.subscribe(subscriber, self.job.room, feed.feed_id, self.job.pin)
        if not videoroom.offer_has_video(offer):
            await subscriber.detach()
            raise RoomError("video", f"feed {feed.feed_id} of room {self.job.room} publishes no video")
        try:
            session, answer = await self._registry.open(RTCSessionDescription(sdp=offer, type="offer"))
        except BaseException:
            await subscriber.detach()  # no session was made: nothing else to undo
            raise
        self._link = link = _Link(feed, subscriber, session)  # from here on, _leave() undoes it all
        await session.set_source(self.job.source, self.job.source_sha256)  # before any frame flows
        await videoroom.start(subscriber, self.job.room, answer.sdp)
        await subscriber.trickle_completed()
        await self._publish(link)
        self.joins += 1
        self.state, self.last_error = "swapping", None
        logger.info(
            "room job %s: swapping feed %d of room %d (session %s)",
            self.job_id,
            feed.feed_id,
            self.job.room,
            session.session_id,
            extra={**self._extra, "event": "room_joined", "session_id": session.session_id},
        )

    async def _publish(self, link: _Link) -> None:
        assert self._janus is not None
        link.publisher = handle = await self._janus.attach()
        display = f"{link.feed.display}{SWAPPED_SUFFIX}"
        joined = await videoroom.join_as_publisher(handle, self.job.room, display, self.job.pin)
        link.published_id = int(joined["id"])
        link.pc = pc = RTCPeerConnection(self._rtc_configuration(f"{self.job_id}-publish"))
        video = pc.addTransceiver(link.session.outputs.subscribe_video(), direction="sendonly")
        prefer_codec(video, "video/VP8")
        audio = link.session.outputs.subscribe_audio()
        if audio is not None:
            pc.addTransceiver(audio, direction="sendonly")
        await pc.setLocalDescription(await pc.createOffer())
        answer = await videoroom.publish(handle, self.job.room, pc.localDescription.sdp, display)
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        await handle.trickle_completed()

    async def _leave(self) -> None:
        """End the subscription's session and our published feed (quiet when Janus is gone)."""
        link, self._link = self._link, None
        if link is None:
            return
        for handle in (link.publisher, link.subscriber):
            if handle is not None:
                await handle.detach()
        if link.pc is not None:
            for sender in link.pc.getSenders():
                if sender.track is not None:
                    sender.track.stop()  # unsubscribes it from the session's relay
            if not await close_peer(link.pc):
                logger.warning("room job %s: subscription close timed out", self.job_id, extra=self._extra)
        await self._registry.end(link.session.session_id)
