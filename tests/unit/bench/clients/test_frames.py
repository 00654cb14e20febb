"""The benchmarks' panning face: `face_share` sets how much of the frame's width the face takes, any
share gives frames of the asked size (edges repeated past the photo), and a share out of range is refused."""

import numpy as np
import pytest

from bench.clients.frames import (
    DEFAULT_FACE_SHARE,
    TARGET_FACE_BOX,
    check_face_share,
    face_size_label,
    panning_face_frames,
)
from gpu_ops.errors import InvalidInputError

PHOTO_SHAPE = (1137, 910, 3)  # TARGET_PHOTO's size


def _marked_photo() -> np.ndarray:
    """A grey photo with the face box white, so a frame shows how wide the face came out."""
    photo = np.full(PHOTO_SHAPE, 60, dtype=np.uint8)
    x1, y1, x2, y2 = TARGET_FACE_BOX
    photo[y1:y2, x1:x2] = 255
    return photo


def _face_width(frame: np.ndarray) -> int:
    columns = np.flatnonzero((frame[..., 0] > 160).any(axis=0))
    return int(columns[-1] - columns[0] + 1)


@pytest.mark.parametrize("share", [0.05, 0.2, DEFAULT_FACE_SHARE, 0.35, 0.6, 0.9])
def test_the_face_takes_the_asked_share_of_the_width(share: float) -> None:
    frames = panning_face_frames(_marked_photo(), 1280, 720, 4, share)
    assert [frame.shape for frame in frames] == [(720, 1280, 3)] * 4
    assert all(frame.dtype == np.uint8 and frame.flags.c_contiguous for frame in frames)
    centred = frames[0]  # the pan's first frame: the face in the middle, nowhere cut by an edge
    assert _face_width(centred) == pytest.approx(share * 1280, rel=0.03, abs=3)


def test_a_small_face_repeats_the_photo_edges_instead_of_black() -> None:
    frame = panning_face_frames(_marked_photo(), 1920, 1080, 1, 0.02)[0]
    assert frame.shape == (1080, 1920, 3)
    assert frame.min() == 60  # only the photo's grey and the white face: no black border


def test_the_frames_pan() -> None:
    frames = panning_face_frames(_marked_photo(), 640, 480, 8, 0.35)
    assert len({frame.tobytes() for frame in frames}) > 4


@pytest.mark.parametrize("share", [0.0, 0.01, 0.95, -0.3, float("nan")])
def test_a_share_out_of_range_is_refused(share: float) -> None:
    with pytest.raises(InvalidInputError, match="face size"):
        check_face_share(share)
    with pytest.raises(InvalidInputError):
        panning_face_frames(_marked_photo(), 640, 480, 1, share)


def test_headers_name_the_share() -> None:
    assert face_size_label(0.35) == "face 35 % of the width"
