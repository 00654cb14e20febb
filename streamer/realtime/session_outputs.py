"""The outputs of one session beyond its own peer: WHEP viewers (and the viewer page, which is a WHEP
client). One relay per session fans its swapped video and its received audio out to every viewer.

Why this shape:
- aiortc's `MediaRelay` lets several senders read one track. With `buffered=False` each viewer holds only
  the newest frame, so a slow viewer (slow encoder, slow network) loses frames instead of queueing them,
  and the relay never waits for a viewer: the session's pace is set by its worker alone.
- aiortc gives each RTCRtpSender its own encoder and has no way to send one encoded stream to several
  peers (keyframe requests and bitrate estimates are per sender), so viewers share the decoded frames and
  the relay, not the encode.
- The swapped video enters through a `OutboundTrack` (one slot, newest wins), so frames pushed while
  nobody watches cost nothing and never pile up.
- aiortc's receive queues are unbounded: a received audio track that nobody reads grows forever (a WHIP
  session's peer never sends audio back). A drain task owned here reads it from the moment it arrives
  into a small queue that the relay reads, so nothing grows whether or not anyone watches, and `close()`
  ends the relay even when aiortc never ends the received track (a peer that left before its media
  started).
"""

import asyncio
import logging
import uuid
from dataclasses import dataclass

from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.contrib.media import MediaRelay
from aiortc.mediastreams import MediaStreamError
from av import VideoFrame

from gpu_ops.errors import LivefuseError
from streamer.realtime.outbound_track import OutboundTrack
from streamer.transport.peer_close import close_peer

logger = logging.getLogger(__name__)

MAX_VIEWERS_PER_SESSION = 8
AUDIO_SLOTS = 4  # 80 ms of 20 ms Opus frames: bursts pass, a stalled reader loses the oldest


class ViewerLimitError(LivefuseError):
    """This session already has its maximum number of viewers; retry later."""


@dataclass
class _Viewer:
    viewer_id: str
    pc: RTCPeerConnection
    tracks: tuple[MediaStreamTrack, ...]


class SessionOutputs:
    """Fan-out of one session to its viewers. `close()` is idempotent and ends every viewer.

    :param session_id: for log lines.
    :param max_viewers: `add_viewer` raises ViewerLimitError beyond this many.
    """

    def __init__(self, session_id: str, *, max_viewers: int = MAX_VIEWERS_PER_SESSION) -> None:
        self.session_id = session_id
        self.max_viewers = max_viewers
        self._relay = MediaRelay()
        self._video = OutboundTrack()
        self._audio: OutboundTrack | None = None
        self._audio_drain: asyncio.Task[None] | None = None
        self._viewers: dict[str, _Viewer] = {}
        self._closing: set[asyncio.Task[bool]] = set()
        self._closed = False

    @property
    def viewer_count(self) -> int:
        return len(self._viewers)

    @property
    def has_audio(self) -> bool:
        return self._audio is not None

    def push_video(self, frame: VideoFrame) -> None:
        """The session's newest swapped frame (from the event loop); kept only until viewers take it."""
        if not self._closed:
            self._video.push(frame)

    def attach_audio(self, track: MediaStreamTrack) -> MediaStreamTrack:
        """Relay the session's received audio to viewers; returns the session's own (buffered) copy.

        The returned track replaces `track` wherever the session itself uses it (a browser call echoes
        its sound back); reading `track` directly as well would split its frames between the readers.
        """
        if self._closed or self._audio is not None:
            return track
        self._audio = audio = OutboundTrack(slots=AUDIO_SLOTS, kind="audio")  # every audio frame is sound
        self._audio_drain = asyncio.create_task(
            self._drain(track, audio), name=f"audio-drain-{self.session_id}"
        )
        return self._relay.subscribe(audio, buffered=True)

    async def _drain(self, received: MediaStreamTrack, audio: OutboundTrack) -> None:
        try:
            while True:
                frame = await received.recv()
                audio.push(frame)  # type: ignore[arg-type]
        except MediaStreamError:
            pass  # the peer's audio ended: the session is closing
        finally:
            audio.stop()  # the relay's reader sees the end and exits

    def subscribe_video(self) -> MediaStreamTrack:
        """A newest-frame copy of the swapped video for one consumer; `stop()` it when done."""
        return self._relay.subscribe(self._video, buffered=False)

    def subscribe_audio(self) -> MediaStreamTrack | None:
        """A newest-frame copy of the received audio (None before any audio arrived)."""
        return self._relay.subscribe(self._audio, buffered=False) if self._audio is not None else None

    async def add_viewer(
        self, offer: RTCSessionDescription, rtc_configuration: RTCConfiguration | None = None
    ) -> tuple[str, RTCSessionDescription]:
        """A new viewer peer answering `offer` (after ICE gathering, so no trickle is needed).

        ViewerLimitError when full; ValueError (or an aiortc error) for an offer it cannot answer.
        `rtc_configuration` holds the ICE servers of the viewer's peer (its owner builds it); none: host
        candidates only.
        """
        if self._closed:
            raise ViewerLimitError(f"session {self.session_id} is closing")
        if len(self._viewers) >= self.max_viewers:
            raise ViewerLimitError(f"session {self.session_id} has all {self.max_viewers} viewers")
        viewer_id = uuid.uuid4().hex[:12]
        pc = RTCPeerConnection(rtc_configuration or RTCConfiguration(iceServers=[]))
        tracks: list[MediaStreamTrack] = []
        viewer = _Viewer(viewer_id, pc, ())
        self._viewers[viewer_id] = viewer
        try:
            await pc.setRemoteDescription(offer)
            kinds = {transceiver.kind for transceiver in pc.getTransceivers()}
            if "video" not in kinds:
                raise ValueError("the offer has no video to receive")
            tracks.append(self.subscribe_video())
            audio = self.subscribe_audio() if "audio" in kinds else None
            if audio is not None:
                tracks.append(audio)
            for track in tracks:
                pc.addTrack(track)
            viewer.tracks = tuple(tracks)
            await pc.setLocalDescription(await pc.createAnswer())
        except BaseException:
            viewer.tracks = tuple(tracks)
            await self.remove_viewer(viewer_id)
            raise
        pc.on("connectionstatechange", lambda: self._on_viewer_state(viewer_id))
        logger.info(
            "session %s: viewer %s joined (%d watching)",
            self.session_id,
            viewer_id,
            len(self._viewers),
            extra={"session_id": self.session_id, "event": "viewer_joined"},
        )
        return viewer_id, pc.localDescription

    def _on_viewer_state(self, viewer_id: str) -> None:
        viewer = self._viewers.get(viewer_id)
        if viewer is None or viewer.pc.connectionState not in ("failed", "closed"):
            return
        task = asyncio.get_running_loop().create_task(
            self.remove_viewer(viewer_id), name=f"viewer-gone-{viewer_id}"
        )
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def remove_viewer(self, viewer_id: str) -> bool:
        """End one viewer; False when there is no such viewer."""
        viewer = self._viewers.pop(viewer_id, None)
        if viewer is None:
            return False
        for track in viewer.tracks:
            track.stop()  # unsubscribes it from the relay
        if not await close_peer(viewer.pc):
            logger.warning("session %s: viewer %s close timed out", self.session_id, viewer_id)
        logger.info(
            "session %s: viewer %s left",
            self.session_id,
            viewer_id,
            extra={"session_id": self.session_id, "event": "viewer_left"},
        )
        return True

    def has_viewer(self, viewer_id: str) -> bool:
        return viewer_id in self._viewers

    def viewer_pc(self, viewer_id: str) -> RTCPeerConnection | None:
        viewer = self._viewers.get(viewer_id)
        return viewer.pc if viewer is not None else None

    async def close(self) -> None:
        """End every viewer, the audio drain and the relay's readers."""
        if self._closed:
            if self._closing:
                await asyncio.gather(*list(self._closing), return_exceptions=True)
            return
        self._closed = True
        await asyncio.gather(*(self.remove_viewer(viewer_id) for viewer_id in list(self._viewers)))
        self._video.stop()  # the relay's reader of the video sees the end and exits
        if self._audio_drain is not None:
            self._audio_drain.cancel()
            await asyncio.gather(self._audio_drain, return_exceptions=True)
        if self._audio is not None:
            self._audio.stop()  # also when the drain never ran
        if self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)
