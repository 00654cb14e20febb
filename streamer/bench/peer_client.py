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
from types import TracebackType
from typing import Any, Literal, Self

import aiohttp
import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCRtpSender, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from av import VideoFrame

from models.face import Frame
from streamer.outputs.frame_stamp import read_stamp, write_stamp
from streamer.transport.ice_addresses import restrict_ice_addresses
from streamer.transport.jitter_marker import install_marker_release

logger = logging.getLogger(__name__)

StampMode = Literal["counter", "clock"]
FrameSource = Callable[[int], Frame]  # frame index -> RGB frame (copied before stamping)
VIDEO_CLOCK = 90000
SENT_HISTORY = 4096


def _now_ms() -> float:
    return time.monotonic() * 1000.0


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
        self, frame_source: FrameSource, fps: float = 30.0, stamp_mode: StampMode = "counter"
    ) -> None:
        super().__init__()
        self._frame_source = frame_source
        self._fps = fps
        self._stamp_mode = stamp_mode
        self._index = 0
        self._started: float | None = None
        self.sent_ms: dict[int, float] = {}

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
        now_ms = _now_ms()
        stamp = self._index if self._stamp_mode == "counter" else int(now_ms) & 0xFFFFFFFF
        write_stamp(rgb, stamp)
        self.sent_ms[stamp] = now_ms
        if len(self.sent_ms) > SENT_HISTORY:
            self.sent_ms.pop(next(iter(self.sent_ms)))
        frame = VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
        frame.pts = int(self._index * VIDEO_CLOCK / self._fps)
        frame.time_base = fractions.Fraction(1, VIDEO_CLOCK)
        self._index += 1
        return frame

    @property
    def sent(self) -> int:
        return self._index


class PeerClient:
    """Async context manager: connect on enter; on exit close the peer and DELETE the session."""

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
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._auth_headers = {"Authorization": f"Bearer {token}"} if token else None
        if isinstance(frame_source, np.ndarray):
            still = frame_source
            frame_source = lambda index: still
        self.track = StampedFrameTrack(frame_source, fps, stamp_mode)
        self._codec = codec
        self._audio = audio
        self.audio_frames_received = 0
        self.answer_sdp: str | None = None
        self.received: list[ReceivedFrame] = []
        self.frames: deque[tuple[int | None, Frame]] = deque(maxlen=max(keep_frames, 1))
        self._keep_frames = keep_frames
        self._arrived = asyncio.Condition()
        self._http: aiohttp.ClientSession | None = None
        self._pc: RTCPeerConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._audio_reader: asyncio.Task[None] | None = None
        self.session_id: str | None = None

    async def __aenter__(self) -> Self:
        restrict_ice_addresses(["127.0.0.1"])
        install_marker_release()
        self._http = aiohttp.ClientSession(headers=self._auth_headers)
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
        assert self._http is not None
        self._pc = pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        transceiver = pc.addTransceiver(self.track, direction="sendrecv")
        if self._codec is not None:
            codecs = RTCRtpSender.getCapabilities("video").codecs
            chosen = [c for c in codecs if c.mimeType.lower() == self._codec.lower()]
            transceiver.setCodecPreferences(chosen + [c for c in codecs if c.mimeType.lower() == "video/rtx"])
        if self._audio is not None:
            pc.addTransceiver(self._audio, direction="sendrecv")
        pc.on("track", self._on_track)
        await pc.setLocalDescription(await pc.createOffer())
        offer = {"sdp": pc.localDescription.sdp, "type": pc.localDescription.type}
        async with self._http.post(f"{self.base_url}/api/sessions", json=offer) as response:
            body = await response.json()
            if response.status != 201:
                raise ConnectionError(f"daemon refused the offer: {response.status} {body}")
        self.session_id = body["id"]
        self.answer_sdp = body["sdp"]
        await pc.setRemoteDescription(RTCSessionDescription(sdp=body["sdp"], type=body["type"]))

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "video" and self._reader is None:
            self._reader = asyncio.create_task(self._read(track), name="peer-client-reader")
        elif track.kind == "audio" and self._audio_reader is None:
            self._audio_reader = asyncio.create_task(self._count_audio(track), name="peer-client-audio")

    async def _count_audio(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                await track.recv()
            except MediaStreamError:
                return
            self.audio_frames_received += 1

    async def _read(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            assert isinstance(frame, VideoFrame)
            now_ms = _now_ms()
            rgb: Frame = np.asarray(frame.to_ndarray(format="rgb24"), dtype=np.uint8)
            stamp = read_stamp(rgb) if rgb.shape[1] >= 512 else None
            latency = self._latency_ms(stamp, now_ms)
            self.received.append(ReceivedFrame(stamp, latency, now_ms))
            if self._keep_frames:
                self.frames.append((stamp, rgb))
            async with self._arrived:
                self._arrived.notify_all()

    def _latency_ms(self, stamp: int | None, now_ms: float) -> float | None:
        if stamp is None:
            return None
        if self.track._stamp_mode == "clock":
            return (int(now_ms) - stamp) % (1 << 32)
        sent = self.track.sent_ms.get(stamp)
        return None if sent is None else now_ms - sent

    async def wait_for_frames(self, count: int, timeout: float = 10.0) -> None:
        """Until `count` frames in all have been received (TimeoutError otherwise)."""
        async with asyncio.timeout(timeout):
            async with self._arrived:
                await self._arrived.wait_for(lambda: len(self.received) >= count)

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
        if self.session_id is None:
            raise RuntimeError("not connected")
        return f"{self.base_url}/api/sessions/{self.session_id}{suffix}"

    async def _request(self, method: str, suffix: str, **kwargs: Any) -> tuple[int, Any]:
        assert self._http is not None
        async with self._http.request(method, self._session_url(suffix), **kwargs) as response:
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

    async def close(self) -> None:
        """End the session on the daemon, stop sending, release everything (idempotent)."""
        if self._http is not None and self.session_id is not None:
            try:
                async with self._http.delete(self._session_url()):
                    pass
            except aiohttp.ClientError:
                logger.debug("session %s: DELETE failed (daemon gone)", self.session_id)
            self.session_id = None
        self.track.stop()
        if self._pc is not None:
            await self._pc.close()
            self._pc = None
        readers = [task for task in (self._reader, self._audio_reader) if task is not None]
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
            self._http = None
