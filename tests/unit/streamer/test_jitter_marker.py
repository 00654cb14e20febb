from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtp import RtpPacket

from streamer.jitter_marker import (
    _ORIGINAL_REMOVE_FRAME,
    install_marker_release,
    is_marker_release_installed,
    remove_frame_on_marker,
)


def _packet(sequence_number: int, timestamp: int, marker: bool, payload: bytes) -> RtpPacket:
    packet = RtpPacket(
        payload_type=96, sequence_number=sequence_number, timestamp=timestamp, marker=int(marker)
    )
    packet._data = payload  # type: ignore[attr-defined]  # what the receiver sets after depayloading
    return packet


def _feed(buffer: JitterBuffer, packets: list[RtpPacket]) -> list[object]:
    released = []
    for packet in packets:
        _, frame = buffer.add(packet)
        released.append(frame)
    return released


def test_frame_released_on_its_marker_packet() -> None:
    buffer = JitterBuffer(capacity=128, is_video=True)
    buffer._remove_frame = lambda seq: remove_frame_on_marker(buffer, seq)  # type: ignore[method-assign]
    frames = _feed(buffer, [_packet(10, 3000, False, b"ab"), _packet(11, 3000, True, b"cd")])
    assert frames[0] is None
    assert frames[1] is not None and frames[1].data == b"abcd" and frames[1].timestamp == 3000
    # the next frame is released on its own marker too, not held for a third one
    frames = _feed(buffer, [_packet(12, 6000, True, b"ef")])
    assert frames[0] is not None and frames[0].data == b"ef"


def test_stock_buffer_waits_for_the_next_frame() -> None:
    """The effect the patch removes: one frame interval of delay per receive hop."""
    buffer = JitterBuffer(capacity=128, is_video=True)
    buffer._remove_frame = lambda seq: _ORIGINAL_REMOVE_FRAME(buffer, seq)  # type: ignore[method-assign]
    frames = _feed(buffer, [_packet(10, 3000, False, b"ab"), _packet(11, 3000, True, b"cd")])
    assert frames == [None, None]
    frames = _feed(buffer, [_packet(12, 6000, True, b"ef")])
    assert frames[0] is not None and frames[0].data == b"abcd"


def test_missing_packet_keeps_the_frame_back() -> None:
    buffer = JitterBuffer(capacity=128, is_video=True)
    buffer._remove_frame = lambda seq: remove_frame_on_marker(buffer, seq)  # type: ignore[method-assign]
    frames = _feed(buffer, [_packet(10, 3000, False, b"ab"), _packet(12, 3000, True, b"ef")])
    assert frames == [None, None]  # packet 11 lost: no partial frame goes to the decoder


def test_audio_buffers_are_untouched() -> None:
    buffer = JitterBuffer(capacity=16, prefetch=4)
    buffer._remove_frame = lambda seq: remove_frame_on_marker(buffer, seq)  # type: ignore[method-assign]
    assert _feed(buffer, [_packet(1, 960, True, b"x")]) == [None]


def test_install_is_idempotent() -> None:
    install_marker_release()
    install_marker_release()
    assert is_marker_release_installed()
    assert JitterBuffer._remove_frame is remove_frame_on_marker
