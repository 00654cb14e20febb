"""aiortc encoder and codec-choice tuning for low latency (DESIGN.md section 6).

- H264: aiortc never sets an x264 preset ("medium": 14 ms/frame at 480p, 39 ms at 720p); ours uses
  `ultrafast` + `zerolatency` (1.2 / 4.1 ms).
- Bitrate: aiortc starts VP8 at 500 kbps and caps it at 1.5 Mbps whatever the size; ours starts from the
  frame size (about 0.08 bit per pixel at 30 fps: 0.74 Mbps at 640x480, 2.2 Mbps at 720p) until the
  receiver's REMB estimate takes over, within 0.3 Mbps and the size's ceiling: libwebrtc's defaults
  (`GetMaxDefaultVideoBitrateKbps`: 0.6 / 1.7 / 2.0 / 2.5 Mbps up to 320x240 / 640x480 / 960x540 /
  above). A loopback or LAN estimate climbs to any cap; past the ceiling a 480p frame only costs more to
  encode, send and decode (at 2.5 Mbps a 480p frame took 3.5 ms to encode, at 1.7 Mbps 3.0), and the
  estimate's wander above it no longer rebuilds the encoder (aiortc makes a new VP8 context, and so a
  keyframe, on every change over 10 %).
- Bandwidth: aiortc's sender already hands the receiver's REMB estimate to the encoder (`target_bitrate`,
  kept within 0.3 Mbps and the size's ceiling here). When that estimate is too low for the frame size (under
  MIN_BITS_PER_PIXEL at 30 fps) and the encoder is straining at it (its quantiser, smoothed over P
  frames, at its codec's `strained_qp` or coarser: FFmpeg's quality side data), the frame is encoded smaller, 3/4 or
  1/2 of each side, rather than as a blocky full-size frame; it goes back up only with 25 % headroom, so a
  wavering estimate does not flip the size (each change costs a keyframe). A constant-bitrate encoder
  spends its whole budget on a still picture too, refining it (a photo at 443 kbit/s: every bit used,
  VP8 quantiser 9 of 63; a moving clip: 33), so what the encoder uses says nothing of congestion; how
  coarse it has to quantise does (libwebrtc's quality scaler decides on the same number).
- VP8 without the temporal denoiser: aiortc sets libvpx's `noise-sensitivity` 4, meant for a camera
  sensor's noise; what the daemon encodes is video the client already encoded and the daemon decoded,
  with a synthetic face in it. Off, a 640x480 frame encodes in 0.6 ms less (3.5 -> 2.9 ms) and comes
  out 3.3 dB closer to the frame handed over (Y-PSNR, same bitrate; the Hamilton clip, 30 and 12 fps).
- VP8 effort follows the machine (encoder_effort.py): libvpx works less while the daemon sheds frames
  for want of CPU; a change of effort builds a new context (a keyframe).
- VP8 first: `prefer_codec` sets a transceiver's codec preferences so answers pick VP8 when offered.

`install_codec_tuning()` swaps the encoder factory aiortc's sender calls; idempotent.
"""

import fractions
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import aiortc.rtcrtpsender
import av
from aiortc import RTCRtpReceiver, RTCRtpSender, RTCRtpTransceiver
from aiortc.codecs import get_encoder
from aiortc.codecs.base import Encoder
from aiortc.codecs.h264 import MAX_FRAME_RATE, H264Encoder
from aiortc.codecs.vpx import Vp8Encoder, number_of_threads
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

from streamer.transport.encoder_effort import VP8_SPEED, encoder_effort

logger = logging.getLogger(__name__)

BITS_PER_PIXEL_AT_30FPS = 0.08
MIN_BITRATE = 300_000
MAX_BITRATE = 2_500_000
SIZE_CEILINGS = ((320 * 240, 600_000), (640 * 480, 1_700_000), (960 * 540, 2_000_000))  # else MAX_BITRATE
MIN_BITS_PER_PIXEL = 0.05  # at 30 fps: below this VP8 at full size turns to blocks
SEND_SCALES = (1.0, 0.75, 0.5)  # of each side; the smallest is the floor
SCALE_UP_HEADROOM = 1.25
BUDGET_USED = 0.7  # without quality side data: output at this share of the estimate means strained
QP_SETTLE_FRAMES = 60  # P frames after a new context before its quantiser counts: CBR starts coarse (2 s)
FF_QP2LAMBDA = 118  # FFmpeg's quality side data holds the quantiser times this
OUTPUT_SMOOTHING = 0.1  # per frame: about a third of a second at 30 fps
X264_LOW_LATENCY_OPTIONS = {"level": "31", "preset": "ultrafast", "tune": "zerolatency"}
# aiortc 1.16's libvpx settings (Vp8Encoder.encode) but for the denoiser; bitrate-derived ones and
# cpu-used (encoder_effort.py) added per context
VP8_OPTIONS = {
    "deadline": "realtime",
    "lag-in-frames": "0",
    "noise-sensitivity": "0",
    "overshoot-pct": "15",
    "partitions": "0",
    "static-thresh": "1",
    "undershoot-pct": "100",
}

_ORIGINAL_GET_ENCODER = get_encoder


def bitrate_for_resolution(width: int, height: int, fps: float = 30.0) -> int:
    """A start bitrate in bit/s for this frame size, within MIN_BITRATE..MAX_BITRATE."""
    wanted = int(width * height * fps * BITS_PER_PIXEL_AT_30FPS)
    return max(MIN_BITRATE, min(wanted, MAX_BITRATE))


def max_bitrate_for_resolution(width: int, height: int) -> int:
    """The most bit/s worth sending for a `width`x`height` frame (libwebrtc's size classes)."""
    pixels = width * height
    return next((bitrate for most, bitrate in SIZE_CEILINGS if pixels <= most), MAX_BITRATE)


def send_scale(width: int, height: int, bitrate: int, current: float = 1.0, fps: float = 30.0) -> float:
    """Which of SEND_SCALES to encode a `width`x`height` frame at for `bitrate` bit/s: the largest one
    the bitrate carries at MIN_BITS_PER_PIXEL; a step larger than `current` needs SCALE_UP_HEADROOM.
    An estimate at the encoder's own ceiling (MAX_BITRATE) is not the network's limit: full size (a
    1080p call on a good network would otherwise always go out at 3/4, 3.1 Mbit/s being over the cap)."""
    if bitrate >= MAX_BITRATE:
        return 1.0
    for scale in SEND_SCALES:
        needed = width * height * scale * scale * fps * MIN_BITS_PER_PIXEL
        if scale > current:
            needed *= SCALE_UP_HEADROOM
        if bitrate >= needed:
            return scale
    return SEND_SCALES[-1]


def scaled_size(width: int, height: int, scale: float) -> tuple[int, int]:
    """Even sides (4:2:0 chroma) of the frame encoded at `scale`."""
    return max(2, round(width * scale / 2) * 2), max(2, round(height * scale / 2) * 2)


def packet_quantiser(packet: av.Packet) -> float | None:
    """The quantiser the encoder chose for `packet` (FFmpeg's quality side data: libvpx on its 0..63
    scale, x264 on 0..51); None where the packet carries none."""
    has_sidedata = getattr(packet, "has_sidedata", None)
    if has_sidedata is None or not has_sidedata("quality_stats"):
        return None
    data = bytes(packet.get_sidedata("quality_stats"))
    return int.from_bytes(data[:4], "little", signed=True) / FF_QP2LAMBDA


class _MeteredContext:
    """An encoder context that hands each packet it encodes to `note` (the size rule reads its
    quantiser) and otherwise is the context aiortc's encoder works with."""

    def __init__(self, context: Any, note: Callable[[av.Packet], None]) -> None:
        self._context = context
        self._note = note

    def encode(self, frame: av.VideoFrame | None = None) -> list[av.Packet]:
        packets: list[av.Packet] = self._context.encode(frame)
        for packet in packets:
            self._note(packet)
        return packets

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class _SizedBitrate:
    """Mixin: start from `bitrate_for_resolution` until the sender applies a REMB estimate.

    aiortc's encoders keep the bitrate in a name-mangled attribute (`_<Class>__target_bitrate`) that
    `encode` also reads; `_mangled_bitrate` names it for the concrete parent class (aiortc 1.16).
    """

    _mangled_bitrate: str
    _bitrate_from_receiver = False
    _estimate = MAX_BITRATE  # the receiver's last estimate; the encoder gets it within the size's ceiling
    send_scale = 1.0  # what the last frame was encoded at (session stats show it)
    sent_size: tuple[int, int] | None = None
    output_bitrate = 0.0  # what the encoder actually produced lately (bit/s, smoothed)
    output_fps = 30.0  # the frame rate it encodes at (smoothed): the size rule is per frame
    output_qp: float | None = None  # the quantiser of its P frames since the context was built (smoothed)
    _qp_frames = 0  # P frames that output_qp has seen
    _quantiser_reported = False  # FFmpeg gives the quantiser (else the budget rule stands in)
    strained_qp: float  # at this quantiser or coarser a low estimate shrinks the frame (per codec)
    _last_encoded_at: float | None = None
    clock = staticmethod(time.monotonic)  # tests give an encoder their own

    def _note_output(self, payloads: list[bytes]) -> None:
        """Smooth the encoder's real output rate: a low estimate only forces a smaller size when the
        encoder is using all of it (a still picture needs little, and its low estimate is no congestion)."""
        now = self.clock()
        if self._last_encoded_at is not None:
            interval_s = max(now - self._last_encoded_at, 1e-3)
            rate = sum(len(payload) for payload in payloads) * 8 / interval_s
            self.output_bitrate += OUTPUT_SMOOTHING * (rate - self.output_bitrate)
            self.output_fps += OUTPUT_SMOOTHING * (min(1.0 / interval_s, 120.0) - self.output_fps)
        self._last_encoded_at = now

    def _note_quality(self, packet: av.Packet) -> None:
        qp = packet_quantiser(packet)
        if qp is None:
            return
        self._quantiser_reported = True
        if packet.is_keyframe:  # coarse at any rate: not the content's need
            return
        self._qp_frames += 1
        self.output_qp = (
            qp if self.output_qp is None else self.output_qp + OUTPUT_SMOOTHING * (qp - self.output_qp)
        )

    def _strained(self) -> bool:
        """Whether the encoder is short of bits: it still quantises coarsely once its rate control has
        settled (or, where FFmpeg gives no quantiser, it uses most of its budget)."""
        if self._quantiser_reported:
            qp = self.output_qp
            return qp is not None and self._qp_frames >= QP_SETTLE_FRAMES and qp >= self.strained_qp
        return self.output_bitrate >= BUDGET_USED * self.target_bitrate

    def _metered(self, context: Any) -> Any:
        """`context`, reporting its packets' quantiser; a new context's rate control starts afresh."""
        self.output_qp = None
        self._qp_frames = 0
        return _MeteredContext(context, self._note_quality)

    @property
    def target_bitrate(self) -> int:
        return int(getattr(self, self._mangled_bitrate))

    @target_bitrate.setter
    def target_bitrate(self, bitrate: int) -> None:
        self._bitrate_from_receiver = True
        self._estimate = max(MIN_BITRATE, min(int(bitrate), MAX_BITRATE))
        setattr(self, self._mangled_bitrate, self._estimate)  # the next frame applies its size's ceiling

    def _context_fits(self, frame: av.VideoFrame) -> bool:
        """Whether the encoder's context can take `frame` as aiortc judges it: the same size and a
        bitrate within 10 % of the target (else aiortc builds a new one, and so a keyframe)."""
        codec = getattr(self, "codec", None)
        current = (codec.bit_rate or 0) if codec is not None else 0
        return (
            codec is not None
            and current > 0
            and (frame.width, frame.height) == (codec.width, codec.height)
            and abs(self.target_bitrate - current) / current <= 0.1
        )

    def _size_bitrate(self, frame: Any) -> Any:
        """The frame to encode: the size rule's start bitrate before any estimate; after one, the frame
        scaled down when the estimate is too low for its size."""
        if not isinstance(frame, av.VideoFrame):
            return frame
        if not self._bitrate_from_receiver:
            setattr(self, self._mangled_bitrate, bitrate_for_resolution(frame.width, frame.height))
        else:
            ceiling = max_bitrate_for_resolution(frame.width, frame.height)
            setattr(self, self._mangled_bitrate, max(MIN_BITRATE, min(self._estimate, ceiling)))
            scale = send_scale(
                frame.width, frame.height, self.target_bitrate, self.send_scale, self.output_fps
            )
            if scale < self.send_scale and not self._strained():
                scale = self.send_scale  # not congested: the content simply needs little
            if scale != self.send_scale:
                logger.info(
                    "encoder: %d kbit/s estimated, %d used at quantiser %s, sending %s of %dx%d",
                    self.target_bitrate // 1000,
                    self.output_bitrate // 1000,
                    "?" if self.output_qp is None else f"{self.output_qp:.0f}",
                    f"{scale:g}",
                    frame.width,
                    frame.height,
                )
                self.send_scale = scale
            if scale < 1.0:
                width, height = scaled_size(frame.width, frame.height, scale)
                frame = frame.reformat(width=width, height=height)
        self.sent_size = (frame.width, frame.height)
        return frame


class TunedVp8Encoder(_SizedBitrate, Vp8Encoder):
    _mangled_bitrate = "_Vp8Encoder__target_bitrate"
    # libvpx's 0..63 scale: a 640x480 photo at 300-443 kbit/s sits at 9-17, a moving clip at 33-44
    strained_qp = 24.0
    _speed = VP8_SPEED  # libvpx cpu-used of the current context

    def encode(self, frame: Any, force_keyframe: bool = False) -> tuple[list[bytes], int]:
        frame = self._size_bitrate(frame)
        if isinstance(frame, av.VideoFrame):
            self._prepare_context(frame)
        payloads, timestamp = super().encode(frame, force_keyframe)
        self._note_output(payloads)
        return payloads, timestamp

    def _prepare_context(self, frame: av.VideoFrame) -> None:
        """Build the libvpx context aiortc would build for this frame (same size, rate and rules for a
        rebuild), with VP8_OPTIONS: aiortc finds it and keeps it."""
        speed = encoder_effort.vp8_speed
        if self._context_fits(frame) and speed == self._speed:
            return
        bitrate = self.target_bitrate
        codec = av.CodecContext.create("libvpx", "w")
        codec.width = frame.width
        codec.height = frame.height
        codec.bit_rate = bitrate
        codec.pix_fmt = "yuv420p"
        codec.gop_size = 3000
        codec.qmin = 2
        codec.qmax = 56
        # minrate = maxrate = bit_rate makes it CBR; FFmpeg derives a 1 s buffer from bufsize / bit_rate
        codec.options = {
            **VP8_OPTIONS,
            "cpu-used": str(speed),
            "bufsize": str(bitrate),
            "minrate": str(bitrate),
            "maxrate": str(bitrate),
        }
        codec.thread_count = number_of_threads(frame.width * frame.height, os.cpu_count() or 1)
        self.codec = self._metered(codec)
        self._speed = speed


class LowLatencyH264Encoder(_SizedBitrate, H264Encoder):
    """aiortc's H264 encoder with x264 `ultrafast` + `zerolatency`."""

    _mangled_bitrate = "_H264Encoder__target_bitrate"
    # x264's 0..51 scale: a 640x480 photo at 300-443 kbit/s sits at 20-24, a moving clip at 30-33
    strained_qp = 27.0

    def encode(self, frame: Any, force_keyframe: bool = False) -> tuple[list[bytes], int]:
        payloads, timestamp = super().encode(self._size_bitrate(frame), force_keyframe)
        self._note_output(payloads)
        return payloads, timestamp

    def _encode_frame(self, frame: av.VideoFrame, force_keyframe: bool) -> Any:
        # aiortc builds its libx264 context inside _encode_frame with fixed options; building it here
        # first (same size, rate and profile) means aiortc's code finds it and keeps it.
        if not self._context_fits(frame):
            self.buffer_data = b""
            self.buffer_pts = None
            codec = av.CodecContext.create("libx264", "w")
            codec.width = frame.width
            codec.height = frame.height
            codec.bit_rate = self.target_bitrate
            codec.pix_fmt = "yuv420p"
            codec.framerate = fractions.Fraction(MAX_FRAME_RATE, 1)
            codec.time_base = fractions.Fraction(1, MAX_FRAME_RATE)
            codec.options = dict(X264_LOW_LATENCY_OPTIONS)
            codec.profile = "Baseline"
            self.codec = self._metered(codec)
        return super()._encode_frame(frame, force_keyframe)


def sender_encoding(sender: RTCRtpSender) -> dict[str, Any] | None:
    """What `sender`'s tuned encoder sends now: bitrate (kbit/s), whether the receiver's estimate set
    it, and the size it encodes at; None before its first frame (or for another encoder)."""
    encoder = getattr(sender, "_RTCRtpSender__encoder", None)  # aiortc 1.16 keeps it name-mangled
    if not isinstance(encoder, _SizedBitrate):
        return None
    size = encoder.sent_size
    return {
        "bitrate_kbps": round(encoder.target_bitrate / 1000),
        "from_receiver_estimate": encoder._bitrate_from_receiver,
        "size": f"{size[0]}x{size[1]}" if size is not None else None,
    }


def get_tuned_encoder(codec: RTCRtpCodecParameters) -> Encoder:
    """aiortc's `get_encoder`, with the tuned H264 and VP8 encoders."""
    mime_type = codec.mimeType.lower()
    if mime_type == "video/h264":
        return LowLatencyH264Encoder()
    if mime_type == "video/vp8":
        return TunedVp8Encoder()
    return _ORIGINAL_GET_ENCODER(codec)


def install_codec_tuning() -> None:
    """Make aiortc's RTP sender create the tuned encoders (process-wide; idempotent)."""
    if aiortc.rtcrtpsender.get_encoder is not get_tuned_encoder:
        aiortc.rtcrtpsender.get_encoder = get_tuned_encoder
        logger.info("aiortc encoders tuned: x264 ultrafast+zerolatency, size-based start bitrate")


def prefer_codec(transceiver: RTCRtpTransceiver, mime_type: str = "video/VP8") -> None:
    """Order the transceiver's codec preferences with `mime_type` first (its RTX kept with it)."""
    capabilities = RTCRtpReceiver.getCapabilities(transceiver.kind)
    if capabilities is None:
        raise ValueError(f"aiortc has no codecs for {transceiver.kind!r}")
    codecs = capabilities.codecs
    first = [codec for codec in codecs if codec.mimeType.lower() == mime_type.lower()]
    transceiver.setCodecPreferences(first + [codec for codec in codecs if codec not in first])
