"""aiortc clients of the WHIP and WHEP endpoints, for the integration tests and `bench --whip`.

`WhipPublisher` behaves like OBS 30+: H264 + Opus only, an offer without candidates (stripped after
gathering, end-of-candidates too), no PATCH, DELETE at the end. `WhepViewer` sends a recvonly offer and
reads the swapped video back, keeping the newest frames and the latency of clock stamps. ICE is
restricted to 127.0.0.1; the jitter-buffer fix and the x264 low-latency options are installed, like the
daemon's.

    async with WhipPublisher(url, frame) as publisher, WhepViewer(url, publisher.session_id) as viewer:
        await viewer.wait_for_frames(30)
"""

import asyncio
import logging
import time
from collections import deque
from types import TracebackType
from typing import Self

import aiohttp
import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc.mediastreams import AudioStreamTrack, MediaStreamError
from av import VideoFrame

from models.face import Frame
from streamer.bench.peer_client import FrameSource, StampedFrameTrack, StampMode
from streamer.outputs.frame_stamp import STAMP_WIDTH, read_stamp
from streamer.transport.codec_tuning import install_codec_tuning
from streamer.transport.ice_addresses import restrict_ice_addresses
from streamer.transport.jitter_marker import install_marker_release

logger = logging.getLogger(__name__)

SDP_CONTENT_TYPE = "application/sdp"
MAX_PLAUSIBLE_LATENCY_MS = 10_000.0  # a larger stamp difference is a misread stamp


def strip_candidates(sdp: str) -> str:
    """`sdp` without a=candidate and a=end-of-candidates lines (what OBS's offer looks like)."""
    lines = sdp.replace("\r\n", "\n").split("\n")
    kept = [line for line in lines if not line.startswith(("a=candidate:", "a=end-of-candidates"))]
    return "\r\n".join(kept)


def _only_codec(sender_kind: str, mime_type: str) -> list:  # type: ignore[type-arg]
    codecs = RTCRtpSender.getCapabilities(sender_kind).codecs
    return [codec for codec in codecs if codec.mimeType.lower() == mime_type.lower()]


class _Endpoint:
    """One peer connection plus its WHIP/WHEP resource: DELETEd and closed on exit (idempotent)."""

    def __init__(self, base_url: str, token: str | None) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http: aiohttp.ClientSession | None = None
        self.pc: RTCPeerConnection | None = None
        self.location: str | None = None
        self.answer_sdp: str | None = None
        self.offer_sdp: str | None = None

    async def _post_offer(self, path: str, sdp: str) -> aiohttp.ClientResponse:
        assert self._http is not None and self.pc is not None
        self.offer_sdp = sdp
        headers = {**self._headers, "Content-Type": SDP_CONTENT_TYPE}
        async with self._http.post(f"{self.base_url}{path}", data=sdp, headers=headers) as response:
            body = await response.text()
            if response.status != 201:
                raise ConnectionError(f"{path} refused the offer: {response.status} {body}")
            self.location = response.headers["Location"]
        self.answer_sdp = body
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))
        return response

    async def __aenter__(self) -> Self:
        restrict_ice_addresses(["127.0.0.1"])
        install_marker_release()
        install_codec_tuning()  # x264 ultrafast + zerolatency, as OBS is set up for WHIP (docs/obs.md)
        self._http = aiohttp.ClientSession()
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        try:
            await self._connect()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _connect(self) -> None:
        raise NotImplementedError

    async def _stop_tasks(self) -> None:
        """Subclasses cancel their own tasks here."""

    async def close(self) -> None:
        """DELETE the resource (like OBS at the end of a stream), then close the peer."""
        location, self.location = self.location, None
        if location is not None and self._http is not None:
            try:
                async with self._http.delete(f"{self.base_url}{location}", headers=self._headers):
                    pass
            except aiohttp.ClientError as error:
                logger.warning("DELETE %s failed: %s", location, error)
        await self._stop_tasks()
        if self.pc is not None:
            await self.pc.close()
        if self._http is not None:
            await self._http.close()
            self._http = None


class WhipPublisher(_Endpoint):
    """Publishes stamped video (H264 only) and a tone (Opus only) to `/whip`, the way OBS does."""

    def __init__(
        self,
        base_url: str,
        frame_source: FrameSource | Frame,
        *,
        fps: float = 30.0,
        stamp_mode: StampMode = "clock",
        audio: bool = True,
        token: str | None = None,
    ) -> None:
        super().__init__(base_url, token)
        if isinstance(frame_source, np.ndarray):
            still = frame_source
            frame_source = lambda index: still
        self.track = StampedFrameTrack(frame_source, fps, stamp_mode)
        self._audio = audio
        self.session_id: str | None = None

    async def _connect(self) -> None:
        assert self.pc is not None
        video = self.pc.addTransceiver(self.track, direction="sendonly")
        video.setCodecPreferences(_only_codec("video", "video/H264"))
        if self._audio:
            audio = self.pc.addTransceiver(AudioStreamTrack(), direction="sendonly")
            audio.setCodecPreferences(_only_codec("audio", "audio/opus"))
        await self.pc.setLocalDescription(await self.pc.createOffer())
        await self._post_offer("/whip", strip_candidates(self.pc.localDescription.sdp))
        assert self.location is not None
        self.session_id = self.location.rstrip("/").rsplit("/", 1)[-1]


class WhepViewer(_Endpoint):
    """Watches a session through `/whep/{id}`: counts frames, keeps the newest, reads clock stamps."""

    def __init__(
        self,
        base_url: str,
        session_id: str,
        *,
        keep_frames: int = 5,
        audio: bool = True,
        token: str | None = None,
    ) -> None:
        super().__init__(base_url, token)
        self.session_id = session_id
        self._audio = audio
        self.frames: deque[Frame] = deque(maxlen=max(keep_frames, 1))
        self.frames_received = 0
        self.audio_frames_received = 0
        self.latencies_ms: list[float] = []
        self._arrived = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []

    async def _connect(self) -> None:
        assert self.pc is not None
        self.pc.addTransceiver("video", direction="recvonly")
        if self._audio:
            self.pc.addTransceiver("audio", direction="recvonly")
        self.pc.on("track", self._on_track)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        await self._post_offer(f"/whep/{self.session_id}", self.pc.localDescription.sdp)

    def _on_track(self, track: MediaStreamTrack) -> None:
        reader = self._read_video(track) if track.kind == "video" else self._count_audio(track)
        self._tasks.append(asyncio.create_task(reader, name=f"whep-{track.kind}"))

    async def _count_audio(self, track: MediaStreamTrack) -> None:
        try:
            while True:
                await track.recv()
                self.audio_frames_received += 1
        except MediaStreamError:
            return

    async def _read_video(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            assert isinstance(frame, VideoFrame)
            now_ms = time.monotonic() * 1000.0  # the publisher's clock (same host)
            rgb: Frame = np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)
            stamp = read_stamp(rgb) if rgb.shape[1] >= STAMP_WIDTH else None
            latency_ms = float((int(now_ms) - stamp) % (1 << 32)) if stamp is not None else None
            if latency_ms is not None and latency_ms < MAX_PLAUSIBLE_LATENCY_MS:
                self.latencies_ms.append(latency_ms)
            self.frames.append(rgb)
            self.frames_received += 1
            async with self._arrived:
                self._arrived.notify_all()

    async def wait_for_frames(self, count: int, timeout: float = 10.0) -> None:
        """Until `count` frames in all have arrived (TimeoutError otherwise)."""
        async with asyncio.timeout(timeout):
            async with self._arrived:
                await self._arrived.wait_for(lambda: self.frames_received >= count)

    async def _stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
