"""Recover a video stream from lost packets quickly: give up on a hole in aiortc's jitter buffer after a
short wait, ask for a keyframe, never ask for one more often than the sender can answer, and never ask
for the same packet again and again.

What aiortc 1.16 already does (rtcrtpreceiver.py, rtcrtpsender.py): the receiver NACKs each new gap in
the sequence numbers and the sender resends from its RTX history; the receiver sends a PLI when its
decoder fails or its jitter buffer overflows; the sender answers PLI and FIR by encoding its next frame
as a keyframe (`_send_keyframe`), i.e. at once. What it lacks: a video jitter buffer holds 512 packets
and releases frames strictly in order, so one packet whose retransmission is lost too (or a cut of the
path) stalls the stream until 512 more packets have arrived, which is seconds at our rates (measured:
p95 525 ms and 1 s gaps at 5 % loss; after a 2 s cut the video never came back before the idle timeout).

The patch (video buffers only, after aiortc's own `add`): when the packets present span more than
`HOLE_WAIT_MS` of media time past a missing one, that packet is given up: the buffer skips to the next
frame that starts after the hole and the receiver sends a PLI, since the frames after a lost one cannot
be decoded cleanly before a keyframe. PLIs (ours and aiortc's own) are limited to one per
`PLI_INTERVAL_S` per receiver: a burst of losses must not make the sender encode a keyframe per frame.

NACKs: aiortc's receiver re-sends its whole list of missing packets each time a new gap appears, so on
a congested link every loss asks again for every packet still missing, the sender resends them all and
the link drowns in retransmissions (measured at a 500 kbit/s cap: 6473 datagrams dropped at the
bottleneck against 743 through; bounded, about 1.5 per one through). Each packet is now asked for at most `MAX_NACKS_PER_PACKET` (5) times
(2 was too few: on a loaded loopback a frame then waited for its packet until the hole timeout);
what still has not come after that is given up by the hole timeout above.
Installed and reverted with the other process patches (streamer/transport/process_patches.py).
"""

import logging
import time
from collections.abc import Awaitable, Callable

from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtcrtpreceiver import RTCRtpReceiver
from aiortc.rtp import RtpPacket

logger = logging.getLogger(__name__)

VIDEO_CLOCK_HZ = 90_000
HOLE_WAIT_MS = 120.0  # a NACK's round trip on a real path fits; a lost retransmission does not stall
PLI_INTERVAL_S = 0.4  # at most one keyframe request per receiver in this long
MAX_NACKS_PER_PACKET = 5  # a few more chances if retransmissions are lost too; never unbounded
NACK_MEMORY = 1024  # sequence numbers remembered per receiver
RECOVERY_FLAG = "_livefuse_loss_recovery"

AddPacket = Callable[[JitterBuffer, RtpPacket], tuple[bool, JitterFrame | None]]
SendPli = Callable[[RTCRtpReceiver, int], Awaitable[None]]
SendNack = Callable[[RTCRtpReceiver, int, list[int]], Awaitable[None]]

_ORIGINAL_ADD: AddPacket = JitterBuffer.add
_ORIGINAL_SEND_PLI: SendPli = RTCRtpReceiver._send_rtcp_pli
_ORIGINAL_SEND_NACK: SendNack = RTCRtpReceiver._send_rtcp_nack


def _timestamp_after(newer: int, older: int) -> int:
    """`newer - older` in RTP timestamp units, across the 32-bit wrap (negative when it is older)."""
    difference = (newer - older) % (1 << 32)
    return difference - (1 << 32) if difference >= 1 << 31 else difference


def skip_stale_hole(buffer: JitterBuffer, newest: RtpPacket, wait_ticks: int) -> bool:
    """Drop the buffer's head up to the first whole frame after a hole that has waited too long; True
    when it did (the caller asks for a keyframe)."""
    if buffer._origin is None:
        return False
    capacity = buffer.capacity
    span = (newest.sequence_number - buffer._origin) % (1 << 16)
    if span >= capacity:
        return False
    slots = [buffer._packets[(buffer._origin + index) % capacity] for index in range(span + 1)]
    hole = next((index for index, packet in enumerate(slots) if packet is None), None)
    if hole is None:
        return False
    after = next((index for index in range(hole + 1, len(slots)) if slots[index] is not None), None)
    if after is None:
        return False
    waited_from = slots[0] if slots[0] is not None else slots[after]
    assert waited_from is not None
    if _timestamp_after(newest.timestamp, waited_from.timestamp) <= wait_ticks:
        return False
    # the frame right after the hole may have lost its first packets: start at the next frame instead
    partial_timestamp = slots[after].timestamp  # type: ignore[union-attr]
    start = next(
        (
            index
            for index in range(after + 1, len(slots))
            if slots[index] is not None and slots[index].timestamp != partial_timestamp  # type: ignore[union-attr]
        ),
        None,
    )
    if start is None:
        return False  # no later frame has begun yet: keep waiting for one
    buffer.remove(start)
    return True


def add_with_hole_timeout(buffer: JitterBuffer, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
    """`JitterBuffer.add`, then (video) give up a hole older than HOLE_WAIT_MS and flag a PLI."""
    pli_flag, frame = _ORIGINAL_ADD(buffer, packet)
    if frame is None and buffer._is_video:
        wait_ticks = round(HOLE_WAIT_MS * VIDEO_CLOCK_HZ / 1000.0)
        if skip_stale_hole(buffer, packet, wait_ticks):
            logger.debug("jitter buffer: gave up a lost packet before seq %d", packet.sequence_number)
            pli_flag = True
            frame = buffer._remove_frame(packet.sequence_number)
    return pli_flag, frame


async def send_rate_limited_pli(receiver: RTCRtpReceiver, media_ssrc: int) -> None:
    """aiortc's `_send_rtcp_pli`, at most once per PLI_INTERVAL_S for each receiver."""
    now = time.monotonic()
    last = getattr(receiver, "_livefuse_last_pli", None)
    if last is not None and now - last < PLI_INTERVAL_S:
        return
    receiver._livefuse_last_pli = now  # type: ignore[attr-defined]
    await _ORIGINAL_SEND_PLI(receiver, media_ssrc)


async def send_bounded_nack(receiver: RTCRtpReceiver, media_ssrc: int, lost: list[int]) -> None:
    """aiortc's `_send_rtcp_nack` for the packets not yet asked for MAX_NACKS_PER_PACKET times."""
    asked: dict[int, int] | None = getattr(receiver, "_livefuse_nacked", None)
    if asked is None:
        asked = receiver._livefuse_nacked = {}  # type: ignore[attr-defined]
    wanted = [sequence for sequence in lost if asked.get(sequence, 0) < MAX_NACKS_PER_PACKET]
    for sequence in wanted:
        asked[sequence] = asked.pop(sequence, 0) + 1  # re-inserted: the dict keeps recent ones last
    while len(asked) > NACK_MEMORY:
        del asked[next(iter(asked))]
    if wanted:
        await _ORIGINAL_SEND_NACK(receiver, media_ssrc, wanted)


def install_loss_recovery() -> None:
    """Patch aiortc's jitter buffer and PLI sender (idempotent; reverted by TransportPatches)."""
    if getattr(JitterBuffer, RECOVERY_FLAG, False):
        return
    JitterBuffer.add = add_with_hole_timeout  # type: ignore[method-assign,assignment]
    RTCRtpReceiver._send_rtcp_pli = send_rate_limited_pli  # type: ignore[method-assign,assignment]
    RTCRtpReceiver._send_rtcp_nack = send_bounded_nack  # type: ignore[method-assign,assignment]
    setattr(JitterBuffer, RECOVERY_FLAG, True)
    logger.info(
        "aiortc loss recovery: holes given up after %.0f ms with a keyframe request (one per %.1f s), "
        "each packet NACKed at most %d times",
        HOLE_WAIT_MS,
        PLI_INTERVAL_S,
        MAX_NACKS_PER_PACKET,
    )
