"""Release a video frame from aiortc's jitter buffer as soon as its RTP marker packet arrives.

aiortc 1.16's `JitterBuffer._remove_frame` only emits a frame when the first packet of the NEXT frame
arrives (it ignores the marker bit), which costs one frame interval per receive hop: 80 ms -> 14 ms
round trip at 640x480 VP8 once fixed (DESIGN.md section 6). The patch is narrow: video buffers only; when
the contiguous packets at the buffer's origin share one timestamp and the last of them carries the marker
bit, that frame is complete and is released now. Otherwise aiortc's own logic runs unchanged.
"""

import logging
from collections.abc import Callable

from aiortc.jitterbuffer import JitterBuffer, JitterFrame

logger = logging.getLogger(__name__)

RemoveFrame = Callable[[JitterBuffer, int], JitterFrame | None]

_ORIGINAL_REMOVE_FRAME: RemoveFrame = JitterBuffer._remove_frame
PATCH_FLAG = "_livefuse_marker_release"


def remove_frame_on_marker(buffer: JitterBuffer, sequence_number: int) -> JitterFrame | None:
    """`JitterBuffer._remove_frame` that also completes a video frame on its marker packet."""
    if buffer._is_video and buffer._origin is not None:
        packets = []
        timestamp = None
        for count in range(buffer.capacity):
            packet = buffer._packets[(buffer._origin + count) % buffer.capacity]
            if packet is None or (timestamp is not None and packet.timestamp != timestamp):
                break
            timestamp = packet.timestamp
            packets.append(packet)
            if packet.marker:
                payload = b"".join(p._data for p in packets)  # type: ignore[attr-defined]
                frame = JitterFrame(data=payload, timestamp=packet.timestamp)
                buffer.remove(count + 1)
                return frame
    return _ORIGINAL_REMOVE_FRAME(buffer, sequence_number)


def install_marker_release() -> None:
    """Patch aiortc's JitterBuffer (idempotent; call at app start and in test clients)."""
    if getattr(JitterBuffer, PATCH_FLAG, False):
        return
    JitterBuffer._remove_frame = remove_frame_on_marker  # type: ignore[method-assign,assignment]
    setattr(JitterBuffer, PATCH_FLAG, True)
    logger.info("aiortc jitter buffer: video frames released on the RTP marker bit")


def is_marker_release_installed() -> bool:
    return bool(getattr(JitterBuffer, PATCH_FLAG, False))
