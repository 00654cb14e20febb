import fractions
import re
from collections.abc import Iterator

import aiortc.rtcrtpsender
import av
import cv2
import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCRtpSender
from aiortc.codecs.h264 import H264Encoder
from aiortc.codecs.vpx import Vp8Encoder
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

from streamer.transport.codec_tuning import (
    MAX_BITRATE,
    MIN_BITS_PER_PIXEL,
    QP_SETTLE_FRAMES,
    LowLatencyH264Encoder,
    TunedVp8Encoder,
    bitrate_for_resolution,
    get_tuned_encoder,
    install_codec_tuning,
    max_bitrate_for_resolution,
    packet_quantiser,
    prefer_codec,
    scaled_size,
    send_scale,
)
from streamer.transport.ice_addresses import restrict_ice_addresses

# aiortc's default adds Google's STUN server: test peers stay on loopback (DESIGN.md section 7)
NO_ICE_SERVERS = RTCConfiguration(iceServers=[])


@pytest.fixture(autouse=True)
def loopback_only() -> Iterator[None]:
    restrict_ice_addresses(["127.0.0.1"])
    yield


def _frame(width: int, height: int, index: int = 0) -> av.VideoFrame:
    rng = np.random.default_rng(index)
    frame = av.VideoFrame.from_ndarray(
        rng.integers(0, 256, (height, width, 3), dtype=np.uint8), format="rgb24"
    )
    frame = frame.reformat(format="yuv420p")
    frame.pts = index * 3000
    frame.time_base = fractions.Fraction(1, 90000)
    return frame


def _x264_settings(encoder: H264Encoder) -> bytes:
    """x264 writes its option string into an SEI NAL of the first frame: the preset's real effect."""
    bitstream = b"".join(encoder._encode_frame(_frame(640, 480), force_keyframe=True))
    match = re.search(rb"options: ([^\x00]+)", bitstream)
    assert match, "no x264 SEI in the bitstream"
    return match.group(1)


def test_h264_uses_ultrafast_zerolatency() -> None:
    stock, tuned = _x264_settings(H264Encoder()), _x264_settings(LowLatencyH264Encoder())
    assert b"subme=7" in stock and b"me=hex" in stock  # aiortc's default: x264 "medium"
    assert b"subme=0" in tuned and b"me=dia" in tuned and b"cabac=0" in tuned  # ultrafast
    assert b"bframes=0" in tuned and b"sliced_threads=1" in tuned  # zerolatency


def test_tuned_h264_keeps_its_context_and_packetizes() -> None:
    tuned = LowLatencyH264Encoder()
    payloads, _ = tuned.encode(_frame(640, 480))
    context = tuned.codec
    payloads_next, _ = tuned.encode(_frame(640, 480, 1))
    assert payloads and payloads_next and tuned.codec is context  # aiortc did not rebuild it


def test_vp8_start_bitrate_follows_frame_size_until_remb() -> None:
    stock, tuned = Vp8Encoder(), TunedVp8Encoder()
    stock.encode(_frame(1280, 720))
    tuned.encode(_frame(1280, 720))
    assert stock.codec is not None and tuned.codec is not None
    assert stock.codec.bit_rate == 500_000
    assert tuned.codec.bit_rate == bitrate_for_resolution(1280, 720) > 2_000_000
    tuned.target_bitrate = 10_000_000  # a REMB estimate from the receiver
    assert tuned.target_bitrate == MAX_BITRATE
    tuned.encode(_frame(1280, 720, 1))
    assert (
        tuned.codec is not None and tuned.codec.bit_rate == MAX_BITRATE
    )  # receiver's estimate wins over the size rule


def test_vp8_bitrate_stays_within_the_frame_size_ceiling() -> None:
    """A loopback or LAN estimate climbs to any cap: a 480p stream stops at libwebrtc's 1.7 Mbit/s, and
    the estimate wandering above it does not rebuild the encoder (a new context is a keyframe)."""
    assert [max_bitrate_for_resolution(*size) for size in ((320, 240), (640, 480), (960, 540), (1280, 720))] == [
        600_000, 1_700_000, 2_000_000, MAX_BITRATE
    ]  # fmt: skip
    tuned = TunedVp8Encoder()
    tuned.encode(_frame(640, 480))
    tuned.target_bitrate = 2_500_000
    tuned.encode(_frame(640, 480, 1))
    context = tuned.codec
    assert context is not None and context.bit_rate == 1_700_000
    for index, estimate in enumerate((2_100_000, 2_400_000, 1_900_000), start=2):
        tuned.target_bitrate = estimate
        tuned.encode(_frame(640, 480, index))
    assert tuned.codec is context  # never rebuilt
    tuned.target_bitrate = 900_000  # below the ceiling the estimate rules again
    tuned.encode(_frame(640, 480, 5))
    assert tuned.codec is not None and tuned.codec.bit_rate == 900_000
    tuned.target_bitrate = 2_500_000
    tuned.encode(_frame(1280, 720, 6))  # a larger frame gets its own, higher ceiling
    assert tuned.codec is not None and tuned.codec.bit_rate == MAX_BITRATE


def test_install_routes_the_sender_to_tuned_encoders() -> None:
    install_codec_tuning()
    install_codec_tuning()
    assert aiortc.rtcrtpsender.get_encoder is get_tuned_encoder
    h264 = RTCRtpCodecParameters(mimeType="video/H264", clockRate=90000, payloadType=102)
    opus = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48000, channels=2, payloadType=111)
    assert isinstance(get_tuned_encoder(h264), LowLatencyH264Encoder)
    assert type(get_tuned_encoder(opus)).__name__ == "OpusEncoder"


async def test_answer_prefers_vp8_when_offer_lists_h264_first() -> None:
    offerer, answerer = RTCPeerConnection(NO_ICE_SERVERS), RTCPeerConnection(NO_ICE_SERVERS)
    try:
        transceiver = offerer.addTransceiver("video")
        codecs = RTCRtpSender.getCapabilities("video").codecs
        transceiver.setCodecPreferences(sorted(codecs, key=lambda c: c.mimeType != "video/H264"))
        await offerer.setLocalDescription(await offerer.createOffer())
        prefer_codec(answerer.addTransceiver("video"), "video/VP8")
        await answerer.setRemoteDescription(offerer.localDescription)
        await answerer.setLocalDescription(await answerer.createAnswer())
        offer_first = next(line for line in offerer.localDescription.sdp.splitlines() if "a=rtpmap" in line)
        answer_first = next(line for line in answerer.localDescription.sdp.splitlines() if "a=rtpmap" in line)
        assert "H264" in offer_first and "VP8" in answer_first
    finally:
        await offerer.close()
        await answerer.close()


def test_the_send_scale_steps_down_when_the_estimate_is_low_and_up_only_with_headroom() -> None:
    full_needs = 640 * 480 * 30 * MIN_BITS_PER_PIXEL  # 461 kbit/s
    assert send_scale(640, 480, 2_000_000) == 1.0
    assert send_scale(640, 480, int(full_needs)) == 1.0
    assert send_scale(640, 480, 400_000) == 0.75  # a 500 kbit/s link's estimate
    assert send_scale(640, 480, 150_000) == 0.5  # the floor
    assert send_scale(1280, 720, 300_000) == 0.5
    # back up from 0.75 only with 25 % headroom over what full size needs
    assert send_scale(640, 480, int(full_needs * 1.1), current=0.75) == 0.75
    assert send_scale(640, 480, int(full_needs * 1.3), current=0.75) == 1.0
    assert scaled_size(640, 480, 0.75) == (480, 360) and scaled_size(642, 482, 0.5) == (320, 240)


def test_an_estimate_at_the_encoders_own_ceiling_keeps_a_1080p_frame_full_size() -> None:
    """Full 1080p needs 3.1 Mbit/s at MIN_BITS_PER_PIXEL, over MAX_BITRATE: only an estimate below the
    ceiling says the network limits, so at the ceiling the frame goes out as it came (bench --live at
    1920x1080 on loopback sent 1440x810 before); just under it, 3/4."""
    assert 1920 * 1080 * 30 * MIN_BITS_PER_PIXEL > MAX_BITRATE
    assert send_scale(1920, 1080, MAX_BITRATE) == 1.0
    assert send_scale(1920, 1080, MAX_BITRATE, current=0.75) == 1.0
    assert send_scale(1920, 1080, MAX_BITRATE - 100_000) == 0.75


class FrameClock:
    """30 fps of encoder time, advanced by each call (the encoder reads it once per frame)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1 / 30
        return self.now


def _still(width: int, height: int, index: int) -> av.VideoFrame:
    frame = av.VideoFrame.from_ndarray(np.full((height, width, 3), 90, np.uint8), format="rgb24")
    frame = frame.reformat(format="yuv420p")
    frame.pts, frame.time_base = index * 3000, fractions.Fraction(1, 90000)
    return frame


def _detailed_still(width: int, height: int, index: int) -> av.VideoFrame:
    """A still picture with detail (gradients and discs) and a small corner that changes every frame:
    a constant-bitrate encoder spends a low estimate on it all, refining it."""
    y, x = np.mgrid[0:height, 0:width]
    image = np.stack([x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], -1).astype(
        np.uint8
    )
    rng = np.random.default_rng(0)
    for _ in range(40):
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        centre = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        cv2.circle(image, centre, int(rng.integers(5, 60)), colour, -1)
    image[:16, :64] = index * 37 % 256
    frame = av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuv420p")
    frame.pts, frame.time_base = index * 3000, fractions.Fraction(1, 90000)
    return frame


@pytest.mark.parametrize("encoder_class", [TunedVp8Encoder, LowLatencyH264Encoder])
def test_a_low_estimate_encodes_smaller_frames_when_the_encoder_strains(encoder_class: type) -> None:
    tuned = encoder_class()
    tuned.clock = FrameClock()
    tuned.encode(_frame(640, 480))
    assert tuned.sent_size == (640, 480)  # before any estimate: the size rule, full size
    tuned.target_bitrate = 350_000  # a REMB estimate from a 400 kbit/s link
    for index in range(1, QP_SETTLE_FRAMES):  # noise: the encoder quantises as coarsely as it may
        tuned.encode(_frame(640, 480, index))
    assert tuned.sent_size == (640, 480), "shrunk before the rate control settled"
    for index in range(QP_SETTLE_FRAMES, QP_SETTLE_FRAMES + 5):
        tuned.encode(_frame(640, 480, index))
    assert tuned.output_qp is not None and tuned.output_qp >= tuned.strained_qp
    assert tuned.sent_size == (480, 360)
    assert tuned.codec is not None and (tuned.codec.width, tuned.codec.height) == (480, 360)
    tuned.target_bitrate = 2_000_000
    tuned.encode(_frame(640, 480, 100))
    assert tuned.sent_size == (640, 480)


def test_a_still_picture_with_a_low_estimate_stays_full_size() -> None:
    """A still picture needs few bits, so its estimate is low too: that is no congestion."""
    tuned = TunedVp8Encoder()
    tuned.clock = FrameClock()  # type: ignore[method-assign,assignment]
    tuned.target_bitrate = 350_000
    for index in range(60):
        tuned.encode(_still(640, 480, index))
    assert tuned.output_bitrate < 0.7 * 350_000
    assert tuned.sent_size == (640, 480)


@pytest.mark.parametrize("encoder_class", [TunedVp8Encoder, LowLatencyH264Encoder])
def test_a_detailed_still_that_spends_a_low_estimate_stays_full_size(encoder_class: type) -> None:
    """Constant bitrate spends the whole estimate on a still picture too (refining it): using the
    budget is no congestion, a quantiser that stays coarse is."""
    tuned = encoder_class()
    tuned.clock = FrameClock()
    tuned.target_bitrate = 350_000
    for index in range(4 * QP_SETTLE_FRAMES // 2):
        tuned.encode(_detailed_still(640, 480, index))
    assert tuned.output_bitrate > 0.7 * 350_000  # the old rule's "uses it all"
    assert tuned.output_qp is not None and tuned.output_qp < tuned.strained_qp
    assert tuned.sent_size == (640, 480)


def test_the_quantiser_is_read_from_the_packets() -> None:
    tuned = TunedVp8Encoder()
    tuned.encode(_frame(640, 480))
    assert tuned.output_qp is None  # a keyframe says nothing of the content's need
    tuned.encode(_frame(640, 480, 1))
    assert tuned.output_qp is not None and 0 <= tuned.output_qp <= 63


def test_vp8_runs_without_the_denoiser_and_aiortc_keeps_its_context() -> None:
    """The tuned encoder builds the libvpx context itself (aiortc's settings, denoiser off): aiortc
    finds it fitting and keeps it; a size or bitrate change still gives a new one."""
    tuned = TunedVp8Encoder()
    tuned._prepare_context(tuned._size_bitrate(_frame(640, 480)))
    context = tuned.codec
    assert context is not None and context.options["noise-sensitivity"] == "0"  # read before it opens
    assert context.options["cpu-used"] == "-6" and context.options["maxrate"] == str(context.bit_rate)
    first, _ = tuned.encode(_frame(640, 480))
    second, _ = tuned.encode(_frame(640, 480, 1))
    assert tuned.codec is context and first and second
    tuned.encode(_frame(320, 240, 2))
    assert tuned.codec is not context and tuned.codec is not None and tuned.codec.width == 320


def test_without_a_quantiser_the_budget_the_encoder_uses_stands_in() -> None:
    """An FFmpeg whose packets carry no quality data: strained means using most of the estimate."""
    assert packet_quantiser(av.Packet(b"\x00" * 8)) is None
    tuned = TunedVp8Encoder()
    tuned.target_bitrate = 350_000
    tuned.output_bitrate = 0.9 * 350_000
    assert tuned._strained()
    tuned.output_bitrate = 0.3 * 350_000
    assert not tuned._strained()
