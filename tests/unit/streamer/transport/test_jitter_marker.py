from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtp import RtpPacket

from streamer.transport.jitter_marker import (
    _ORIGINAL_REMOVE_FRAME,
    RemoveFrame,
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


def _buffer(
    remove: RemoveFrame, capacity: int = 128, prefetch: int = 0, is_video: bool = True
) -> JitterBuffer:
    class Buffer(JitterBuffer):
        def _remove_frame(self, sequence_number: int) -> JitterFrame | None:
            return remove(self, sequence_number)

    return Buffer(capacity=capacity, prefetch=prefetch, is_video=is_video)


def _feed(buffer: JitterBuffer, packets: list[RtpPacket]) -> list[JitterFrame | None]:
    released: list[JitterFrame | None] = []
    for packet in packets:
        _, frame = buffer.add(packet)
        released.append(frame)
    return released


def test_frame_released_on_its_marker_packet() -> None:
    buffer = _buffer(remove_frame_on_marker)
    frames = _feed(buffer, [_packet(10, 3000, False, b"ab"), _packet(11, 3000, True, b"cd")])
    assert frames[0] is None
    assert frames[1] is not None and frames[1].data == b"abcd" and frames[1].timestamp == 3000
    # the next frame is released on its own marker too, not held for a third one
    frames = _feed(buffer, [_packet(12, 6000, True, b"ef")])
    assert frames[0] is not None and frames[0].data == b"ef"


def test_stock_buffer_waits_for_the_next_frame() -> None:
    """The effect the patch removes: one frame interval of delay per receive hop."""
    buffer = _buffer(_ORIGINAL_REMOVE_FRAME)
    frames = _feed(buffer, [_packet(10, 3000, False, b"ab"), _packet(11, 3000, True, b"cd")])
    assert frames == [None, None]
    frames = _feed(buffer, [_packet(12, 6000, True, b"ef")])
    assert frames[0] is not None and frames[0].data == b"abcd"


def test_missing_packet_keeps_the_frame_back() -> None:
    buffer = _buffer(remove_frame_on_marker)
    frames = _feed(buffer, [_packet(10, 3000, False, b"ab"), _packet(12, 3000, True, b"ef")])
    assert frames == [None, None]  # packet 11 lost: no partial frame goes to the decoder


def test_audio_buffers_are_untouched() -> None:
    buffer = _buffer(remove_frame_on_marker, capacity=16, prefetch=4, is_video=False)
    assert _feed(buffer, [_packet(1, 960, True, b"x")]) == [None]


def test_install_is_idempotent() -> None:
    install_marker_release()
    install_marker_release()
    assert is_marker_release_installed()
    assert JitterBuffer._remove_frame is remove_frame_on_marker
