"""aiortc peers of a Janus VideoRoom for the room tests and `bench --room`: a publisher that sends
stamped frames (and, when asked, audio) into a room, and a subscriber that receives one feed and reads
the stamps back (order, latency against the publisher's send times).

aiortc gathers every candidate before its SDP is made and never trickles, so each offer or answer is
followed by a trickle `{"completed": true}`. ICE addresses are the caller's business (the tests restrict
them to their namespace's address).

    async with JanusPublisher(url, room, frame, display="alice") as alice:
        async with JanusSubscriber(url, room, alice.feed_id, sent_ms=alice.track.sent_ms) as bob:
            await bob.wait_for_frames(30)
"""

import asyncio
import itertools
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Self

from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import AudioStreamTrack

from bench.clients.loopback_client import read_track
from bench.clients.peer_client import FrameSource, LiveResult, ReceivedFrame, StampedFrameTrack
from models.face import Frame
from streamer.outputs.frame_stamp import STAMP_WIDTH, read_stamp
from streamer.realtime.frame_conversion import Swscale
from streamer.sfu import videoroom
from streamer.sfu.janus_api import JanusAuth, JanusHandle, JanusSession

logger = logging.getLogger(__name__)


class JanusPublisher:
    """Joins `room` as `display` and publishes stamped video (and silence as audio with `audio=True`)."""

    def __init__(
        self,
        url: str,
        room: int,
        frame_source: FrameSource | Frame,
        *,
        display: str,
        feed_id: int | None = None,
        pin: str | None = None,
        auth: JanusAuth | None = None,
        audio: bool = True,
        video: bool = True,
        fps: float = 30.0,
    ) -> None:
        self.url, self.room, self.display, self.pin = url, room, display, pin
        self._auth = auth
        self._wanted_feed_id = feed_id
        self.feed_id: int | None = None
        self.track = StampedFrameTrack(frame_source, fps)
        self._audio = AudioStreamTrack() if audio else None
        self._video = video
        self.session: JanusSession | None = None
        self.handle: JanusHandle | None = None
        self.pc: RTCPeerConnection | None = None

    async def __aenter__(self) -> Self:
        try:
            self.session = await JanusSession.create(self.url, self._auth)
            self.handle = handle = await self.session.attach()
            joined = await videoroom.join_as_publisher(
                handle, self.room, self.display, self.pin, self._wanted_feed_id
            )
            self.feed_id = int(joined["id"])
            self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
            if self._video:
                self.pc.addTransceiver(self.track, direction="sendonly")
            if self._audio is not None:
                self.pc.addTransceiver(self._audio, direction="sendonly")
            await self.pc.setLocalDescription(await self.pc.createOffer())
            answer = await videoroom.publish(handle, self.room, self.pc.localDescription.sdp)
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
            await handle.trickle_completed()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def unpublish(self) -> None:
        """Stop publishing and stay in the room (the media stops; the participant remains)."""
        assert self.handle is not None
        await videoroom.unpublish(self.handle, self.room)

    async def close(self) -> None:
        """Leave the room (the feed unpublishes) and close the peer; idempotent."""
        session, self.session = self.session, None
        if session is not None:
            await session.close()
        self.track.stop()
        if self._audio is not None:
            self._audio.stop()
        if self.pc is not None:
            await self.pc.close()


class JanusSubscriber:
    """Receives feed `feed_id` of `room`; `received` holds every frame's stamp and latency (from
    `sent_ms`, the publisher's send times by stamp), `audio_frames` counts the audio that came."""

    def __init__(
        self,
        url: str,
        room: int,
        feed_id: int,
        *,
        sent_ms: Mapping[int, float] | None = None,
        pin: str | None = None,
        auth: JanusAuth | None = None,
        keep_frames: bool = False,
    ) -> None:
        self.url, self.room, self.feed_id, self.pin = url, room, feed_id, pin
        self._auth = auth
        self._sent_ms = sent_ms if sent_ms is not None else {}
        self.received: list[ReceivedFrame] = []
        self.last_frame: Frame | None = None
        self._keep_frames = keep_frames
        self.audio_frames = 0
        self.session: JanusSession | None = None
        self.handle: JanusHandle | None = None
        self.pc: RTCPeerConnection | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._arrived = asyncio.Condition()
        self._swscale = Swscale()

    async def __aenter__(self) -> Self:
        try:
            self.session = await JanusSession.create(self.url, self._auth)
            self.handle = await self.session.attach()
            offer = await videoroom.subscribe(self.handle, self.room, self.feed_id, self.pin)
            self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
            self.pc.on("track", self._on_track)
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
            await self.pc.setLocalDescription(await self.pc.createAnswer())
            await videoroom.start(self.handle, self.room, self.pc.localDescription.sdp)
            await self.handle.trickle_completed()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def _on_track(self, track: MediaStreamTrack) -> None:
        self._readers.append(
            read_track(track, self._swscale, self._arrived, self._video_arrived, self._audio_arrived)
        )

    def _video_arrived(self, rgb: Frame, arrived: float) -> None:
        stamp = read_stamp(rgb) if rgb.shape[1] >= STAMP_WIDTH else None
        sent = self._sent_ms.get(stamp) if stamp is not None else None
        self.received.append(ReceivedFrame(stamp, None if sent is None else arrived - sent, arrived))
        if self._keep_frames:
            self.last_frame = rgb

    def _audio_arrived(self) -> None:
        self.audio_frames += 1

    async def wait_for_frames(self, count: int, timeout: float = 10.0) -> None:
        """Until `count` video frames in all have arrived (TimeoutError otherwise)."""
        async with asyncio.timeout(timeout):
            async with self._arrived:
                await self._arrived.wait_for(lambda: len(self.received) >= count)

    def result(self, since: int = 0, sent: int = 0) -> LiveResult:
        frames = self.received[since:]
        stamps = [frame.stamp for frame in frames if frame.stamp is not None]
        return LiveResult(
            sent=sent,
            received=len(frames),
            unreadable=len(frames) - len(stamps),
            duplicates=len(stamps) - len(set(stamps)),
            out_of_order=sum(1 for a, b in itertools.pairwise(stamps) if b < a),
            latencies_ms=tuple(frame.latency_ms for frame in frames if frame.latency_ms is not None),
        )

    async def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            await session.close()
        if self.pc is not None:
            await self.pc.close()
        readers, self._readers = self._readers, []
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
