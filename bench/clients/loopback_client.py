"""The set-up every loopback client of the daemon shares (the peer client, the WHIP publisher, the WHEP
viewer): ICE on 127.0.0.1 only, the jitter-buffer and loss-recovery fixes, one HTTP session with the token, one peer
connection (its ICE servers given by the caller), readers for the tracks that come back, Location
headers resolved against the base URL, and a close that ends the daemon-side resource first.
"""

import asyncio
import logging
import time
import urllib.parse
from collections.abc import Callable
from types import TracebackType
from typing import Self

import aiohttp
import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError
from av import VideoFrame

from models.face import Frame
from streamer.realtime.frame_conversion import Swscale
from streamer.transport.ice_addresses import restrict_ice_addresses
from streamer.transport.jitter_marker import install_marker_release
from streamer.transport.jitter_recovery import install_loss_recovery

logger = logging.getLogger(__name__)


def now_ms() -> float:
    """The clock the stamps use: both ends run on this host."""
    return time.monotonic() * 1000.0


def read_track(
    track: MediaStreamTrack,
    swscale: Swscale,
    arrived: asyncio.Condition,
    on_video: Callable[[Frame, float], None],
    on_audio: Callable[[], None],
) -> "asyncio.Task[None]":
    """A task reading `track` until it ends: each video frame as RGB to `on_video(rgb, now_ms)`, then
    `arrived` notified; each audio frame counted by `on_audio()`. Every loopback peer reads this way."""

    async def read_video() -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            assert isinstance(frame, VideoFrame)
            arrived_ms = now_ms()
            on_video(np.asarray(swscale.to_rgb(frame), dtype=np.uint8), arrived_ms)
            async with arrived:
                arrived.notify_all()

    async def count_audio() -> None:
        try:
            while True:
                await track.recv()
                on_audio()
        except MediaStreamError:
            return

    reader = read_video() if track.kind == "video" else count_audio()
    return asyncio.create_task(reader, name=f"read-{track.kind}-{track.id}")


class LoopbackClient:
    """Async context manager: `_connect()` (the subclass's offer/answer) on enter; on exit or `close()`,
    `_end_remote()` (the subclass's DELETE), then the readers, the peer and the HTTP session stop.
    Idempotent; a failed connect closes what it opened before raising.

    Frames that come back go to `_on_video(rgb, now_ms)`; `wait_for_frames` waits on `video_received`.
    """

    def __init__(
        self, base_url: str, token: str | None, rtc_configuration: RTCConfiguration | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # ICE servers and policy of this client's peer (e.g. relay only through TURN); none: host only
        self._rtc_configuration = rtc_configuration or RTCConfiguration(iceServers=[])
        self._auth_headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http: aiohttp.ClientSession | None = None
        self.pc: RTCPeerConnection | None = None
        self.video_received = 0
        self.audio_frames_received = 0
        self._arrived = asyncio.Condition()
        self._readers: list[asyncio.Task[None]] = []
        self._swscale = Swscale()  # kept contexts: the client shares this machine's cores with the daemon

    async def __aenter__(self) -> Self:
        restrict_ice_addresses(["127.0.0.1"])
        install_marker_release()
        install_loss_recovery()  # a browser's receiver recovers from loss too (libwebrtc); aiortc's alone stalls
        self._http = aiohttp.ClientSession(headers=self._auth_headers)
        self.pc = RTCPeerConnection(self._rtc_configuration)
        self.pc.on("track", self._on_track)
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

    @property
    def http(self) -> aiohttp.ClientSession:
        if self._http is None:
            raise RuntimeError("not connected")
        return self._http

    async def _connect(self) -> None:
        raise NotImplementedError

    def resolve(self, location: str) -> str:
        """The URL a `Location` header names: absolute ones (a daemon behind a proxy, --public-url) as
        they are, paths under `base_url`. A resource's later requests go there, not to `base_url`."""
        return urllib.parse.urljoin(self.base_url + "/", location)

    async def _end_remote(self) -> None:
        """End the daemon-side resource (session, WHIP stream, WHEP viewer); the daemon may be gone."""

    def _on_video(self, rgb: Frame, now_ms: float) -> None:
        """One received frame, as RGB, with the time it arrived."""

    def _on_track(self, track: MediaStreamTrack) -> None:
        self._readers.append(
            read_track(track, self._swscale, self._arrived, self._video_arrived, self._audio_arrived)
        )

    def _video_arrived(self, rgb: Frame, arrived_ms: float) -> None:
        self._on_video(rgb, arrived_ms)
        self.video_received += 1

    def _audio_arrived(self) -> None:
        self.audio_frames_received += 1

    async def wait_for_frames(self, count: int, timeout: float = 10.0) -> None:
        """Until `count` video frames in all have arrived (TimeoutError otherwise)."""
        async with asyncio.timeout(timeout):
            async with self._arrived:
                await self._arrived.wait_for(lambda: self.video_received >= count)

    async def _stop_sending(self) -> None:
        """Stop the tracks this client sends (before the peer closes)."""

    async def close(self) -> None:
        if self._http is not None:
            try:
                await self._end_remote()
            except aiohttp.ClientError as error:
                logger.debug(
                    "%s: ending the remote resource failed (daemon gone): %s", type(self).__name__, error
                )
        await self._stop_sending()
        if self.pc is not None:
            await self.pc.close()  # kept (closed) so a caller can still read its final state
        readers, self._readers = self._readers, []
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
            self._http = None
