"""Frame stamps: a 32-bit value painted into the top-left strip of a frame, so latency and order can be
measured end to end through encoders that keep no metadata.

Layout (mirrored by the page's JS): 32 blocks of 16x16 px in one row at y 0..15, block i at x = 16*i,
most significant bit first, white (255) = 1, black (0) = 0. Reading averages the centre 8x8 of each block
(grey = mean of R, G, B) and thresholds at 128; a block average between 64 and 192 means the strip is not
a stamp (codec damage or no stamp at all) and the read gives None.
"""

import numpy as np

from gpu_ops.errors import InvalidFrameError
from models.face import Frame

STAMP_BITS = 32
BLOCK_SIZE = 16
STAMP_WIDTH = STAMP_BITS * BLOCK_SIZE  # 512 px
STAMP_HEIGHT = BLOCK_SIZE
_CENTRE = slice(4, 12)  # centre 8x8 of a 16x16 block
_AMBIGUOUS_LOW = 64
_AMBIGUOUS_HIGH = 192


def _check_frame(frame_rgb: Frame) -> None:
    if frame_rgb.ndim != 3 or frame_rgb.shape[2] != 3 or frame_rgb.dtype != np.uint8:
        raise InvalidFrameError(f"stamp needs an HxWx3 uint8 frame, got {frame_rgb.shape} {frame_rgb.dtype}")
    if frame_rgb.shape[0] < STAMP_HEIGHT or frame_rgb.shape[1] < STAMP_WIDTH:
        raise InvalidFrameError(
            f"stamp needs a frame of at least {STAMP_WIDTH}x{STAMP_HEIGHT}, got {frame_rgb.shape[1]}x"
            f"{frame_rgb.shape[0]}"
        )


def write_stamp(frame_rgb: Frame, value: int) -> None:
    """Paint `value` (0 <= value < 2**32) into the strip at the top-left, in place."""
    _check_frame(frame_rgb)
    if not 0 <= value < 1 << STAMP_BITS:
        raise ValueError(f"stamp value {value} does not fit in {STAMP_BITS} bits")
    bits = (value >> np.arange(STAMP_BITS - 1, -1, -1)) & 1
    row = np.repeat(bits.astype(np.uint8) * 255, BLOCK_SIZE)  # [512]
    frame_rgb[:STAMP_HEIGHT, :STAMP_WIDTH, :] = row[None, :, None]


def read_stamp(frame_rgb: Frame) -> int | None:
    """The stamped value, or None when the strip is not a plausible stamp."""
    _check_frame(frame_rgb)
    strip = frame_rgb[:STAMP_HEIGHT, :STAMP_WIDTH, :].astype(np.float32)
    blocks = strip.reshape(BLOCK_SIZE, STAMP_BITS, BLOCK_SIZE, 3)  # y, block, x, channel
    averages = blocks[_CENTRE, :, _CENTRE, :].mean(axis=(0, 2, 3))  # [32]
    if np.any((averages > _AMBIGUOUS_LOW) & (averages < _AMBIGUOUS_HIGH)):
        return None
    value = 0
    for bit in averages >= 128:
        value = (value << 1) | int(bit)
    return value
