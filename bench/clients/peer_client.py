"""An aiortc client for a livefuse daemon: sends stamped frames, receives the swapped video back and
measures per-frame latency from the stamps. Used by the integration tests and `run_stream.py bench
--live`; ICE is restricted to 127.0.0.1 and the jitter-buffer fix is installed, like the daemon's.

    async with PeerClient("http://127.0.0.1:8080", frame) as client:
        await client.upload_source(jpeg_bytes, "image/jpeg")
        await client.wait_for_frames(60)
        print(client.result().p50_ms)
"""

import asyncio
import fractions
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCRtpSender, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from av import VideoFrame

from bench.clients.loopback_client import LoopbackClient
from bench.clients.loopback_client import now_ms as clock_ms
from models.face import Frame
from streamer.outputs.frame_stamp import STAMP_WIDTH, read_stamp, write_stamp
from streamer.realtime.frame_conversion import Swscale

logger = logging.getLogger(__name__)

StampMode = Literal["counter", "clock"]
FrameSource = Callable[[int], Frame]  # frame index -> RGB frame (copied before stamping)
VIDEO_CLOCK = 90000
SENT_HISTORY = 4096


@dataclass(frozen=True)
class ReceivedFrame:
    stamp: int | None
    latency_ms: float | None
    received_ms: float


@dataclass(frozen=True)
class LiveResult:
    """What came back: counts, order checks, latency percentiles (ms) over frames with a readable stamp."""

    sent: int
    received: int
    unreadable: int
    duplicates: int
    out_of_order: int
    latencies_ms: tuple[float, ...]

    def percentile(self, q: float) -> float | None:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else None

    @property
    def p50_ms(self) -> float | None:
        return self.percentile(50)

    @property
    def p95_ms(self) -> float | None:
        return self.percentile(95)


class StampedFrameTrack(MediaStreamTrack):
    """Video at `fps` from `frame_source`, each frame stamped with a counter or a ms clock."""

    kind = "video"

    def __init__(
        self, frame_source: FrameSource | Frame, fps: float = 30.0, stamp_mode: StampMode = "counter"
    ) -> None:
        super().__init__()
        if isinstance(frame_source, np.ndarray):
            still = frame_source
            frame_source = lambda index: still
        self._frame_source: FrameSource = frame_source
        self._fps = fps
        self._stamp_mode = stamp_mode
        self._index = 0
        self._started: float | None = None
        self.sent_ms: dict[int, float] = {}
        self._swscale = Swscale()

    async def recv(self) -> VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._started is None:
            self._started = time.monotonic()
        due = self._started + self._index / self._fps
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -2 / self._fps:  # the loop fell behind: re-anchor rather than send a burst
            self._started = time.monotonic() - self._index / self._fps
        rgb = np.array(self._frame_source(self._index), dtype=np.uint8, copy=True)
        now_ms = clock_ms()
        stamp = self._index if self._stamp_mode == "counter" else int(now_ms) & 0xFFFFFFFF
        write_stamp(rgb, stamp)
        self.sent_ms[stamp] = now_ms
        if len(self.sent_ms) > SENT_HISTORY:
            self.sent_ms.pop(next(iter(self.sent_ms)))
        frame = self._swscale.to_yuv420p(rgb)
        frame.pts = int(self._index * VIDEO_CLOCK / self._fps)
        frame.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        self._index += 1
        return frame

    @property
    def sent(self) -> int:
        return self._index


class PeerClient(LoopbackClient):
    """Async context manager: connect on enter; on exit DELETE the session and close the peer."""

    def __init__(
        self,
        base_url: str,
        frame_source: FrameSource | Frame,
        *,
        fps: float = 30.0,
        stamp_mode: StampMode = "counter",
        codec: str | None = None,
        keep_frames: int = 0,
        audio: MediaStreamTrack | None = None,
        token: str | None = None,
        rtc_configuration: RTCConfiguration | None = None,
        latency_stamp: bool = True,
    ) -> None:
        super().__init__(base_url, token, rtc_configuration)
        self.track = StampedFrameTrack(frame_source, fps, stamp_mode)
        self._latency_stamp = latency_stamp  # tell the daemon the frames carry stamps (kept off its viewers)
        self._codec = codec
        self._audio = audio
        self.answer_sdp: str | None = None
        self.received: list[ReceivedFrame] = []
        self.frames: deque[tuple[int | None, Frame]] = deque(maxlen=max(keep_frames, 1))
        self._keep_frames = keep_frames
        self.session_id: str | None = None
        self.session_url: str | None = None  # from the Location: names the daemon that holds the call

    async def _connect(self) -> None:
        assert self.pc is not None
        transceiver = self.pc.addTransceiver(self.track, direction="sendrecv")
        if self._codec is not None:
            codecs = RTCRtpSender.getCapabilities("video").codecs
            chosen = [c for c in codecs if c.mimeType.lower() == self._codec.lower()]
            transceiver.setCodecPreferences(chosen + [c for c in codecs if c.mimeType.lower() == "video/rtx"])
        if self._audio is not None:
            self.pc.addTransceiver(self._audio, direction="sendrecv")
        await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = {"sdp": self.pc.localDescription.sdp, "type": self.pc.localDescription.type}
        async with self.http.post(f"{self.base_url}/api/sessions", json=offer) as response:
            body = await response.json()
            if response.status != 201:
                raise ConnectionError(f"daemon refused the offer: {response.status} {body}")
            self.session_url = self.resolve(response.headers["Location"])
        self.session_id = body["id"]
        self.answer_sdp = body["sdp"]
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=body["sdp"], type=body["type"]))
        if self._latency_stamp:
            status, body = await self._request("PATCH", "/settings", json={"latency_stamp": True})
            # a daemon older than the setting (a bench --baseline revision) neither knows nor blanks stamps
            if status != 200 and not (status == 400 and "latency_stamp" in str(body)):
                raise ValueError(f"settings refused: {status} {body}")

    def _on_video(self, rgb: Frame, now_ms: float) -> None:
        stamp = read_stamp(rgb) if rgb.shape[1] >= STAMP_WIDTH else None
        self.received.append(ReceivedFrame(stamp, self._latency_ms(stamp, now_ms), now_ms))
        if self._keep_frames:
            self.frames.append((stamp, rgb))

    def _latency_ms(self, stamp: int | None, now_ms: float) -> float | None:
        if stamp is None:
            return None
        if self.track._stamp_mode == "clock":
            return (int(now_ms) - stamp) % (1 << 32)
        sent = self.track.sent_ms.get(stamp)
        return None if sent is None else now_ms - sent

    def result(self, since: int = 0) -> LiveResult:
        """Summary of the frames received from index `since` of `received` on."""
        frames = self.received[since:]
        stamps = [frame.stamp for frame in frames if frame.stamp is not None]
        return LiveResult(
            sent=self.track.sent,
            received=len(frames),
            unreadable=len(frames) - len(stamps),
            duplicates=len(stamps) - len(set(stamps)),
            out_of_order=sum(1 for a, b in itertools.pairwise(stamps) if b < a),
            latencies_ms=tuple(frame.latency_ms for frame in frames if frame.latency_ms is not None),
        )

    def _session_url(self, suffix: str = "") -> str:
        if self.session_url is None:
            raise RuntimeError("not connected")
        return f"{self.session_url}{suffix}"

    async def _request(self, method: str, suffix: str, **kwargs: Any) -> tuple[int, Any]:
        async with self.http.request(method, self._session_url(suffix), **kwargs) as response:
            is_json = response.content_type == "application/json"
            return response.status, (await response.json()) if is_json else await response.text()

    async def upload_source(self, image: bytes, content_type: str = "image/jpeg") -> dict[str, Any]:
        status, body = await self._request(
            "PUT", "/source", data=image, headers={"Content-Type": content_type}
        )
        if status != 200:
            raise ValueError(f"source upload refused: {status} {body}")
        return dict(body)

    async def clear_source(self) -> None:
        await self._request("DELETE", "/source")

    async def upload_reference(self, image: bytes, content_type: str = "image/jpeg") -> dict[str, Any]:
        """The face `face_selector: "reference"` picks out (PUT /api/sessions/{id}/reference)."""
        status, body = await self._request(
            "PUT", "/reference", data=image, headers={"Content-Type": content_type}
        )
        if status != 200:
            raise ValueError(f"reference upload refused: {status} {body}")
        return dict(body)

    async def patch_settings(self, changes: dict[str, Any]) -> dict[str, Any]:
        status, body = await self._request("PATCH", "/settings", json=changes)
        if status != 200:
            raise ValueError(f"settings refused: {status} {body}")
        return dict(body)

    async def session_stats(self) -> dict[str, Any]:
        status, body = await self._request("GET", "")
        if status != 200:
            raise ValueError(f"no stats: {status} {body}")
        return dict(body)

    async def _end_remote(self) -> None:
        session_url, self.session_url = self.session_url, None
        self.session_id = None
        if session_url is not None:
            async with self.http.delete(session_url):
                pass

    async def _stop_sending(self) -> None:
        self.track.stop()
