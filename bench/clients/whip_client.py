"""aiortc clients of the WHIP and WHEP endpoints, for the integration tests and `bench --whip`.

`WhipPublisher` behaves like OBS 30+: H264 + Opus only, an offer without candidates (stripped after
gathering, end-of-candidates too), no PATCH, DELETE at the end. `WhepViewer` sends a recvonly offer and
reads the swapped video back, keeping the newest frames and the latency of clock stamps. ICE is
restricted to 127.0.0.1; the jitter-buffer fix and the x264 low-latency options are installed, like the
daemon's.

    async with WhipPublisher(url, frame) as publisher, WhepViewer(url, publisher.session_id) as viewer:
        await viewer.wait_for_frames(30)
"""

import logging
from collections import deque

from aiortc import RTCConfiguration, RTCRtpSender, RTCSessionDescription
from aiortc.mediastreams import AudioStreamTrack

from bench.clients.loopback_client import LoopbackClient
from bench.clients.peer_client import FrameSource, StampedFrameTrack, StampMode
from models.face import Frame
from streamer.outputs.frame_stamp import STAMP_WIDTH, read_stamp
from streamer.transport.codec_tuning import install_codec_tuning

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


class _Endpoint(LoopbackClient):
    """One peer connection plus its WHIP/WHEP resource: DELETEd (like OBS at the end) and closed on exit."""

    def __init__(
        self, base_url: str, token: str | None, rtc_configuration: RTCConfiguration | None = None
    ) -> None:
        super().__init__(base_url, token, rtc_configuration)
        self.location: str | None = None  # as the daemon sent it
        self.resource_url: str | None = None  # where its DELETE goes (absolute behind a proxy)
        self.links: list[str] = []  # its Link headers (ICE servers, RFC 9725 section 4.6)
        self.answer_sdp: str | None = None
        self.offer_sdp: str | None = None

    async def _post_offer(self, path: str, sdp: str) -> None:
        assert self.pc is not None
        self.offer_sdp = sdp
        headers = {"Content-Type": SDP_CONTENT_TYPE}
        async with self.http.post(f"{self.base_url}{path}", data=sdp, headers=headers) as response:
            body = await response.text()
            if response.status != 201:
                raise ConnectionError(f"{path} refused the offer: {response.status} {body}")
            self.location = response.headers["Location"]
            self.links = response.headers.getall("Link", [])
        self.resource_url = self.resolve(self.location)
        self.answer_sdp = body
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))

    async def _end_remote(self) -> None:
        resource_url, self.resource_url = self.resource_url, None
        self.location = None
        if resource_url is not None:
            async with self.http.delete(resource_url):
                pass


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
        rtc_configuration: RTCConfiguration | None = None,
    ) -> None:
        super().__init__(base_url, token, rtc_configuration)
        self.track = StampedFrameTrack(frame_source, fps, stamp_mode)
        self._audio = audio
        self.session_id: str | None = None

    async def _connect(self) -> None:
        assert self.pc is not None
        install_codec_tuning()  # x264 ultrafast + zerolatency, as OBS is set up for WHIP (docs/obs.md)
        video = self.pc.addTransceiver(self.track, direction="sendonly")
        video.setCodecPreferences(_only_codec("video", "video/H264"))
        if self._audio:
            audio = self.pc.addTransceiver(AudioStreamTrack(), direction="sendonly")
            audio.setCodecPreferences(_only_codec("audio", "audio/opus"))
        await self.pc.setLocalDescription(await self.pc.createOffer())
        await self._post_offer("/whip", strip_candidates(self.pc.localDescription.sdp))
        assert self.location is not None
        self.session_id = self.location.rstrip("/").rsplit("/", 1)[-1]

    async def _stop_sending(self) -> None:
        self.track.stop()


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
        rtc_configuration: RTCConfiguration | None = None,
    ) -> None:
        super().__init__(base_url, token, rtc_configuration)
        self.session_id = session_id
        self._audio = audio
        self.frames: deque[Frame] = deque(maxlen=max(keep_frames, 1))
        self.latencies_ms: list[float] = []

    @property
    def frames_received(self) -> int:
        return self.video_received

    async def _connect(self) -> None:
        assert self.pc is not None
        self.pc.addTransceiver("video", direction="recvonly")
        if self._audio:
            self.pc.addTransceiver("audio", direction="recvonly")
        await self.pc.setLocalDescription(await self.pc.createOffer())
        await self._post_offer(f"/whep/{self.session_id}", self.pc.localDescription.sdp)

    def _on_video(self, rgb: Frame, now_ms: float) -> None:
        stamp = read_stamp(rgb) if rgb.shape[1] >= STAMP_WIDTH else None
        latency_ms = float((int(now_ms) - stamp) % (1 << 32)) if stamp is not None else None
        if latency_ms is not None and latency_ms < MAX_PLAUSIBLE_LATENCY_MS:
            self.latencies_ms.append(latency_ms)
        self.frames.append(rgb)
