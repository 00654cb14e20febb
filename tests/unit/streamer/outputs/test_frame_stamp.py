import cv2
import numpy as np
import pytest

from gpu_ops.errors import InvalidFrameError
from streamer.outputs.frame_stamp import STAMP_HEIGHT, STAMP_WIDTH, read_stamp, write_stamp


def _frame(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (480, 640, 3), dtype=np.uint8)


@pytest.mark.parametrize("value", [0, 1, 0x80000000, 0xFFFFFFFF, 123456789])
def test_stamp_round_trips(value: int) -> None:
    frame = _frame()
    write_stamp(frame, value)
    assert read_stamp(frame) == value


def test_layout_is_msb_first_white_is_one() -> None:
    frame = np.zeros((480, 640, 3), np.uint8)
    write_stamp(frame, 0x80000001)
    assert (frame[:16, :16] == 255).all()  # bit 31 -> first block white
    assert (frame[:16, 16:32] == 0).all()
    assert (frame[:16, 496:512] == 255).all()  # bit 0 -> last block
    assert (frame[16:, :] == 0).all() and (frame[:, 512:] == 0).all()  # nothing outside the strip


def test_survives_codec_like_blur_and_chroma_subsampling() -> None:
    frame = _frame(1)
    write_stamp(frame, 0xA5A5_0F0F)
    yuv = cv2.cvtColor(cv2.GaussianBlur(frame, (5, 5), 1.5), cv2.COLOR_RGB2YUV_I420)
    damaged = np.asarray(cv2.cvtColor(yuv, cv2.COLOR_YUV2RGB_I420), dtype=np.uint8)
    assert read_stamp(damaged) == 0xA5A5_0F0F


def test_unstamped_frame_reads_none() -> None:
    frame = np.full((480, 640, 3), 128, np.uint8)
    assert read_stamp(frame) is None


def test_rejects_small_frames_and_out_of_range_values() -> None:
    with pytest.raises(InvalidFrameError):
        read_stamp(np.zeros((STAMP_HEIGHT, STAMP_WIDTH - 1, 3), np.uint8))
    with pytest.raises(ValueError):
        write_stamp(_frame(), 1 << 32)
