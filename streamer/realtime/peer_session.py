"""One WebRTC peer: its RTCPeerConnection, the reader task that feeds the worker, the outbound swapped
track, its settings and source. Ends itself (through `on_ended`) on ICE failure, a closed connection or a
peer that stopped sending for `idle_timeout_s` (for up to NETWORK_GAP_TIMEOUT_S while its network path is
still alive: a cut of the path is not a gone peer, streamer/realtime/idle_reaper.py); its owner (the
SessionRegistry) then calls `close()`.
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCIceCandidate,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError
from av import VideoFrame

from models.face import Frame
from streamer.realtime.batch_worker import BatchWorker
from streamer.realtime.idle_reaper import FIRST_FRAME_TIMEOUT_S, NETWORK_GAP_TIMEOUT_S
from streamer.realtime.metrics import DaemonMetrics
from streamer.realtime.outbound_track import MediaFrame, OutboundTrack
from streamer.realtime.pipeline_binding import PipelineBinding, Settings
from streamer.realtime.session_outputs import SessionOutputs
from streamer.realtime.stamp_blanking import without_stamp
from streamer.realtime.swap_cadence import SwapCadence
from streamer.realtime.worker_lane import InboundFrame, WorkerLane
from streamer.transport.codec_tuning import prefer_codec, sender_encoding
from streamer.transport.path_liveness import gap_ended_s_ago, path_state
from streamer.transport.peer_close import close_peer

logger = logging.getLogger(__name__)

EndedCallback = Callable[[str, str], None]  # (session_id, reason)
FPS_WINDOW_S = 2.0


@dataclass(frozen=True)
class SourceInfo:
    sha256: str
    width: int
    height: int


def _rate(stamps: deque[float], now: float) -> float:
    while stamps and now - stamps[0] > FPS_WINDOW_S:
        stamps.popleft()
    return round(len(stamps) / FPS_WINDOW_S, 1)


def _resolution(size: tuple[int, int] | None) -> dict[str, int] | None:
    return None if size is None else {"width": size[0], "height": size[1]}


class PeerSession:
    """`accept_offer()` starts it; `close()` is idempotent and works before start and after a failure."""

    def __init__(
        self,
        session_id: str,
        worker: BatchWorker,
        binding: PipelineBinding,
        metrics: DaemonMetrics,
        cadence: SwapCadence,
        *,
        idle_timeout_s: float = 5.0,
        on_ended: EndedCallback | None = None,
        rtc_configuration: RTCConfiguration | None = None,
    ) -> None:
        self.session_id = session_id
        # ICE servers (STUN/TURN) for the daemon's side of this call; none: host candidates only
        self._rtc_configuration = rtc_configuration or RTCConfiguration(iceServers=[])
        self._worker = worker
        self._binding = binding
        self._metrics = metrics
        self._cadence = cadence  # the daemon's one swap cadence, shared by every session (fairness)
        self._idle_timeout_s = idle_timeout_s
        self._on_ended = on_ended
        self._loop = asyncio.get_running_loop()
        self._pc: RTCPeerConnection | None = None
        self._video_sender: RTCRtpSender | None = None
        self._outbound = OutboundTrack(on_sent=self._on_sent)
        self.outputs = SessionOutputs(session_id)  # WHEP viewers and the viewer page
        self._sends_video = True
        self._lane = WorkerLane(session_id, None, binding.default_settings, self._deliver_from_worker)
        self.frames_shed = 0  # skipped by the swap cadence (never sent unswapped)
        self._reader: asyncio.Task[None] | None = None
        self._closed: asyncio.Future[None] | None = None
        self._ended = False
        self.source_info: SourceInfo | None = None
        self.reference_sha256: str | None = None
        self.frames_in = 0
        self.resolution_in: tuple[int, int] | None = None  # (width, height) of the newest frame received
        self.resolution_out: tuple[int, int] | None = None  # of the newest frame sent (to the peer, viewers)
        self._in_stamps: deque[float] = deque()
        self._out_stamps: deque[float] = deque()
        self._extra = {"session_id": session_id}

    @property
    def settings(self) -> Settings:
        return self._lane.settings

    @property
    def outbound_max_waiting(self) -> int:
        """The most frames that ever waited for this session's encoder at once (its slot: 1)."""
        return self._outbound.max_waiting

    async def accept_offer(self, offer: RTCSessionDescription) -> RTCSessionDescription:
        """Answer `offer` (after ICE gathering, so no trickle is needed); ValueError on a bad SDP."""
        if self._pc is not None or self._closed is not None:
            raise RuntimeError(f"session {self.session_id}: accept_offer() called twice or after close()")
        started = time.perf_counter()
        self._lane.stream = await self._worker.call(self._binding.pipeline.new_stream)
        self._pc = pc = RTCPeerConnection(self._rtc_configuration)
        pc.on("connectionstatechange", self._on_connection_state)
        pc.on("track", self._on_track)
        # created before the offer is applied so it takes the offer's video m-line with our preferences
        video = pc.addTransceiver(self._outbound, direction="sendrecv")
        prefer_codec(video, "video/VP8")
        self._video_sender = video.sender
        await pc.setRemoteDescription(offer)
        await pc.setLocalDescription(await pc.createAnswer())
        # a WHIP publisher only sends: nothing reads the outbound track then (its viewers get the video)
        self._sends_video = "send" in (video.currentDirection or "")
        self._worker.attach(self._lane)
        elapsed_ms = round((time.perf_counter() - started) * 1000.0, 1)
        logger.info(
            "session %s: answered in %.0f ms",
            self.session_id,
            elapsed_ms,
            extra={**self._extra, "event": "answered", "latency_ms": elapsed_ms},
        )
        return pc.localDescription

    async def add_ice_candidate(self, candidate: RTCIceCandidate | None) -> None:
        """A trickled remote candidate (None: end of candidates); ignored before the offer or after close."""
        if self._pc is not None and self._closed is None:
            await self._pc.addIceCandidate(candidate)

    def _on_track(self, track: MediaStreamTrack) -> None:
        assert self._pc is not None
        if track.kind == "audio":
            self._pc.addTrack(self.outputs.attach_audio(track))  # the call's sound back, and to viewers
        elif track.kind == "video" and self._reader is None:
            self._reader = asyncio.create_task(self._read_video(track), name=f"reader-{self.session_id}")

    def _on_connection_state(self) -> None:
        if self._pc is None:
            return
        state = self._pc.connectionState
        logger.info(
            "session %s: connection %s", self.session_id, state, extra={**self._extra, "event": state}
        )
        if state in ("failed", "closed"):
            self._end(f"connection {state}")

    def _end(self, reason: str) -> None:
        if self._ended or self._closed is not None:
            return
        self._ended = True
        logger.info(
            "session %s: ended (%s)", self.session_id, reason, extra={**self._extra, "event": "ended"}
        )
        if self._on_ended is not None:
            self._on_ended(self.session_id, reason)

    def in_network_gap(self) -> bool:
        """True while the path is silent (or too briefly silent to tell) but ICE up and consent fresh,
        and for `idle_timeout_s` after it came back (time for the video to resume):
        streamer/transport/path_liveness.py."""
        state = path_state(self._pc)
        if state in ("gap", "quiet"):  # quiet: the next look (in a second) tells gap from talking
            return True
        back_s_ago = gap_ended_s_ago(self._pc)
        return state == "talking" and back_s_ago is not None and back_s_ago < self._idle_timeout_s

    def _keeps_waiting(self, silent_s: float, gap_logged: bool) -> bool:
        """After `silent_s` without video: wait on (a network gap) or end the session (a gone peer)."""
        if not self.frames_in or silent_s >= max(NETWORK_GAP_TIMEOUT_S, self._idle_timeout_s):
            return False
        if not self.in_network_gap():
            return False
        if not gap_logged:
            logger.info(
                "session %s: no video for %.1f s in a network gap (ICE up, peer silent); waiting up to %.0f s",
                self.session_id,
                silent_s,
                NETWORK_GAP_TIMEOUT_S,
                extra={**self._extra, "event": "network_gap"},
            )
        return True

    async def _read_video(self, track: MediaStreamTrack) -> None:
        """Newest-frame reader: aiortc's receive queue is unbounded, so read it as fast as it fills."""
        timeout = FIRST_FRAME_TIMEOUT_S
        last_frame_at = time.monotonic()
        gap_logged = False
        try:
            while self._closed is None:
                try:
                    # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that races with
                    # a frame arriving, and close() would then wait on this task forever
                    async with asyncio.timeout(timeout):
                        frame = await track.recv()
                except TimeoutError:
                    silent_s = time.monotonic() - last_frame_at
                    if self._keeps_waiting(silent_s, gap_logged):
                        gap_logged = True
                        timeout = min(self._idle_timeout_s, 1.0)  # look at the path again soon
                        continue
                    self._end(f"no video for {silent_s:.0f} s")
                    return
                except MediaStreamError:
                    self._end("remote video ended")
                    return
                if gap_logged:
                    logger.info(
                        "session %s: video back after %.1f s",
                        self.session_id,
                        time.monotonic() - last_frame_at,
                        extra={**self._extra, "event": "network_gap_over"},
                    )
                    gap_logged = False
                last_frame_at = time.monotonic()
                timeout = self._idle_timeout_s
                assert isinstance(frame, VideoFrame)
                self.resolution_in = (frame.width, frame.height)
                self._count_in()
                item = InboundFrame(frame, time.monotonic())
                lane = self._lane
                if not self._binding.wants_swap(lane.source, lane.settings):
                    self._push_out(item, frame)  # passthrough: no trip through the worker
                elif not self._admit():
                    continue  # shed by the swap cadence: never sent unswapped
                elif lane.mailbox.put(item):
                    self._metrics.frames_dropped.labels(session_id=self.session_id).inc()
        except Exception:  # a reader bug ends this session only; logged with its id
            logger.exception("session %s: reader failed", self.session_id, extra=self._extra)
            self._end("reader failed")

    def _count_in(self) -> None:
        self.frames_in += 1
        self._in_stamps.append(time.monotonic())
        self._metrics.frames_in.labels(session_id=self.session_id).inc()

    def _admit(self) -> bool:
        cadence = self._cadence
        admitted = cadence.admit(self.session_id)
        self.frames_shed += not admitted
        self._metrics.swap_share.set(float(cadence.share))
        return admitted

    def _deliver_from_worker(self, item: InboundFrame, output: VideoFrame) -> None:
        try:
            self._loop.call_soon_threadsafe(self._push_swapped, item, output)
        except RuntimeError:  # loop already closed during shutdown: nothing left to send to
            pass

    def _push_swapped(self, item: InboundFrame, output: VideoFrame) -> None:
        self._cadence.swapped()
        self._push_out(item, output)

    def _push_out(self, item: InboundFrame, output: VideoFrame) -> None:
        if self._closed is not None:
            return
        self.resolution_out = (output.width, output.height)
        stamped = self._lane.settings.latency_stamp and self.outputs.viewer_count
        self.outputs.push_video(without_stamp(output) if stamped else output)
        if self._sends_video and not self._outbound.push(output, item.received_at):
            self._metrics.frames_dropped.labels(session_id=self.session_id).inc()

    def _on_sent(self, frame: MediaFrame, age_s: float) -> None:
        self._out_stamps.append(time.monotonic())
        self._metrics.frames_out.labels(session_id=self.session_id).inc()
        self._metrics.frame_age_seconds.labels(stage="encoder").observe(age_s)
        self._metrics.server_latency_seconds.observe(age_s)

    async def set_source(self, image: Frame, sha256: str) -> SourceInfo:
        """Prepare `image` as this session's source on the worker thread; NoFaceError when faceless."""
        settings = self._lane.settings
        pipeline = self._binding.pipeline
        self._lane.source = await self._worker.call(lambda: pipeline.prepare_source(image, settings))
        self.source_info = SourceInfo(sha256, int(image.shape[1]), int(image.shape[0]))
        logger.info("session %s: source set", self.session_id, extra={**self._extra, "event": "source_set"})
        return self.source_info

    async def set_reference(self, image: Frame | None, sha256: str | None) -> None:
        """Which face to swap with `face_selector="reference"`; NoFaceError when the photo is faceless."""
        pipeline, lane = self._binding.pipeline, self._lane
        await self._worker.call(lambda: pipeline.set_reference(lane.stream, image))
        self.reference_sha256 = sha256
        logger.info(
            "session %s: reference %s",
            self.session_id,
            "set" if image is not None else "cleared",
            extra={**self._extra, "event": "reference_set" if image is not None else "reference_cleared"},
        )

    def clear_source(self) -> None:
        self._lane.source = None
        self.source_info = None

    def update_settings(self, changes: Mapping[str, object]) -> Settings:
        """Validated by the pipeline's rules (ValueError); applies from the next frame."""
        self._lane.settings = self._binding.update_settings(self._lane.settings, **changes)
        return self._lane.settings

    def stats(self) -> dict[str, Any]:
        now = time.monotonic()
        processing = sorted(self._lane.processing_ms)
        return {
            "id": self.session_id,
            "frames_in": self.frames_in,
            "frames_out": self._outbound.sent,
            "frames_dropped": self._lane.mailbox.dropped
            + self._lane.batcher_dropped
            + self._outbound.dropped,
            "processing_ms": {
                "last": round(self._lane.processing_ms[-1], 2) if processing else None,
                "p50": round(processing[len(processing) // 2], 2) if processing else None,
            },
            "fps_in": _rate(self._in_stamps, now),
            "fps_out": _rate(self._out_stamps, now),
            "resolution_in": _resolution(self.resolution_in),
            "resolution_out": _resolution(self.resolution_out),
            "settings": asdict(self._lane.settings),
            "has_source": self._lane.source is not None,
            "has_reference": self.reference_sha256 is not None,
            "connection_state": self._pc.connectionState if self._pc else "new",
            "quality": {**self._cadence.describe(), "frames_shed": self.frames_shed},
            "viewers": self.outputs.viewer_count,
            # the encoder's bitrate (the receiver's REMB estimate once it came) and the size it sends
            "sending": sender_encoding(self._video_sender) if self._video_sender is not None else None,
        }

    async def close(self) -> None:
        if self._closed is not None:
            await self._closed
            return
        self._closed = self._loop.create_future()
        try:
            self._worker.detach(self._lane)
            self._cadence.forget(self.session_id)
            if self._reader is not None:
                self._reader.cancel()
                await asyncio.gather(self._reader, return_exceptions=True)
            self._outbound.stop()
            await self.outputs.close()
            if self._pc is not None and not await close_peer(self._pc):
                logger.warning("session %s: peer connection close timed out", self.session_id, extra=self._extra)
            self._metrics.forget_session(self.session_id)
            logger.info("session %s: closed", self.session_id, extra={**self._extra, "event": "closed"})
        finally:
            self._closed.set_result(None)
