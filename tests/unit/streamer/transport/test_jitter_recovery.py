"""Loss recovery in aiortc's video jitter buffer: a hole older than HOLE_WAIT_MS is given up with a
keyframe request, a younger one waits for its retransmission, and keyframe requests are rate-limited."""

from collections.abc import Iterator

import pytest
from aiortc.jitterbuffer import JitterBuffer
from aiortc.rtcrtpreceiver import RTCRtpReceiver
from aiortc.rtp import RtpPacket

from streamer.transport import jitter_recovery
from streamer.transport.jitter_marker import install_marker_release
from streamer.transport.process_patches import restore, snapshot

FRAME_TICKS = 3000  # 30 fps on the 90 kHz clock


@pytest.fixture(autouse=True)
def patched() -> Iterator[None]:
    before = snapshot()
    install_marker_release()
    jitter_recovery.install_loss_recovery()
    yield
    restore(before)


def _packet(sequence: int, frame: int, last: bool) -> RtpPacket:
    packet = RtpPacket(sequence_number=sequence % (1 << 16), timestamp=(frame * FRAME_TICKS) % (1 << 32))
    packet.marker = 1 if last else 0
    packet._data = bytes([frame % 256])  # type: ignore[attr-defined]
    return packet


def _frames(first_frame: int, count: int, first_sequence: int) -> list[RtpPacket]:
    """`count` frames of two packets each."""
    packets = []
    for offset in range(count):
        sequence = first_sequence + 2 * offset
        packets += [
            _packet(sequence, first_frame + offset, False),
            _packet(sequence + 1, first_frame + offset, True),
        ]
    return packets


def _feed(buffer: JitterBuffer, packets: list[RtpPacket]) -> tuple[list[int], int]:
    """(timestamps of the frames released, keyframe requests flagged)."""
    released, requests = [], 0
    for packet in packets:
        pli, frame = buffer.add(packet)
        requests += pli
        if frame is not None:
            released.append(frame.timestamp)
    return released, requests


def test_a_lost_packet_is_given_up_once_the_packets_after_it_span_the_wait() -> None:
    buffer = JitterBuffer(capacity=512, is_video=True)
    packets = _frames(0, 12, 1000)
    lost = packets.pop(4)  # the first packet of frame 2
    assert lost.timestamp == 2 * FRAME_TICKS
    released, requests = _feed(buffer, packets)
    # frames 0 and 1 out at once; 2 lost its start; 3 waited until 120 ms of media had passed it
    assert released[:2] == [0, FRAME_TICKS]
    assert 2 * FRAME_TICKS not in released
    assert released[2] == 3 * FRAME_TICKS and requests == 1
    wait_frames = jitter_recovery.HOLE_WAIT_MS / 1000 * 30
    assert len(released) >= 12 - 1 - wait_frames  # the rest came out as their packets arrived


def test_a_retransmission_within_the_wait_fills_the_hole_and_nothing_is_skipped() -> None:
    buffer = JitterBuffer(capacity=512, is_video=True)
    packets = _frames(0, 4, 1000)
    lost = packets.pop(2)
    released, requests = _feed(buffer, packets)
    assert released == [0] and requests == 0  # frame 1 waits for its first packet
    resent, _ = _feed(buffer, [lost, *_frames(4, 1, 1008)])
    assert resent[0] == FRAME_TICKS  # the retransmission completed it, in order
    assert requests == 0


def test_after_a_cut_the_first_whole_frame_comes_out_with_a_keyframe_request() -> None:
    buffer = JitterBuffer(capacity=512, is_video=True)
    before, _ = _feed(buffer, _frames(0, 3, 65530))  # across the sequence number wrap too
    assert before == [0, FRAME_TICKS, 2 * FRAME_TICKS]
    _feed(buffer, [_packet(65536, 3, False)])  # frame 3 starts, then the path is cut for 2 s
    after, requests = _feed(buffer, _frames(63, 3, 65536 + 121))  # 60 frames' packets never came
    assert after[0] == 64 * FRAME_TICKS and requests >= 1  # 63 lost nothing but is skipped as unsure


def test_audio_buffers_are_left_alone() -> None:
    buffer = JitterBuffer(capacity=16, prefetch=4)
    assert not jitter_recovery.skip_stale_hole(buffer, _packet(0, 0, True), 0)
    packets = _frames(0, 6, 0)
    del packets[1]
    _, requests = _feed(buffer, packets)
    assert requests == 0


class FakeReceiver:
    """Stands in for an RTCRtpReceiver: the limiter keeps its bookkeeping on the instance."""


async def test_keyframe_requests_are_limited_per_receiver(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, int]] = []

    async def record(receiver: FakeReceiver, media_ssrc: int) -> None:
        sent.append((id(receiver), media_ssrc))

    now = [100.0]
    monkeypatch.setattr(jitter_recovery, "_ORIGINAL_SEND_PLI", record)
    monkeypatch.setattr(jitter_recovery.time, "monotonic", lambda: now[0])
    first, second = FakeReceiver(), FakeReceiver()
    for _ in range(5):  # a burst of losses
        await jitter_recovery.send_rate_limited_pli(first, 7)  # type: ignore[arg-type]
    await jitter_recovery.send_rate_limited_pli(second, 8)  # type: ignore[arg-type]
    now[0] += jitter_recovery.PLI_INTERVAL_S
    await jitter_recovery.send_rate_limited_pli(first, 7)  # type: ignore[arg-type]
    assert sent == [(id(first), 7), (id(second), 8), (id(first), 7)]
    assert RTCRtpReceiver._send_rtcp_pli is jitter_recovery.send_rate_limited_pli


async def test_each_lost_packet_is_nacked_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiortc re-sends its whole missing list on every new gap; on a congested link that asks for the
    same packets again and again. Only the first MAX_NACKS_PER_PACKET requests for a packet go out."""
    sent: list[list[int]] = []

    async def record(receiver: FakeReceiver, media_ssrc: int, lost: list[int]) -> None:
        sent.append(lost)

    monkeypatch.setattr(jitter_recovery, "_ORIGINAL_SEND_NACK", record)
    monkeypatch.setattr(jitter_recovery, "MAX_NACKS_PER_PACKET", 2)
    receiver = FakeReceiver()
    for missing in ([10], [10, 11], [10, 11, 12], [10, 11, 12]):  # aiortc's lists as gaps appear
        await jitter_recovery.send_bounded_nack(receiver, 7, missing)  # type: ignore[arg-type]
    assert sent == [[10], [10, 11], [11, 12], [12]]
