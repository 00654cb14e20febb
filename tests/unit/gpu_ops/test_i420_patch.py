"""Finding what a swap changed and merging it into decoded I420 planes (NumPy; the CuPy run of the same
functions is tests/gpu/test_yuv_outside_face_gpu.py)."""

import numpy as np
import pytest

from gpu_ops.colorspace import i420_to_rgb_cpu, rgb_to_i420_cpu
from gpu_ops.i420_patch import Box, Planes, changed_boxes, even_box, merged_i420, patched_box, write_box


def _picture(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _covered(boxes: list[Box], height: int, width: int) -> np.ndarray:
    inside = np.zeros((height, width), bool)
    for box in boxes:
        inside[box.top : box.bottom, box.left : box.right] = True
    return inside


@pytest.mark.parametrize("width", [640, 642, 641 * 2 + 2, 1280])  # rows of 8-, 2-, 2- and 8-byte words
def test_two_faces_make_two_even_boxes_covering_every_changed_pixel(width: int) -> None:
    before = _picture(480, width)
    after = before.copy()
    after[101:233, 37:181] ^= 1  # odd edges on purpose
    after[300:421, width - 203 : width - 61, 2] += 7
    boxes = changed_boxes(before, after)
    assert len(boxes) == 2
    changed = (before != after).any(axis=2)
    inside = _covered(boxes, 480, width)
    assert inside[changed].all()
    assert all(value % 2 == 0 for box in boxes for value in (box.left, box.top, box.right, box.bottom))
    assert inside.sum() < 1.1 * changed.sum() + 4 * (480 + width)  # tight: a few pixels of alignment
    assert changed_boxes(before, before.copy()) == []


def test_the_whole_frame_merge_is_the_boxes_merge() -> None:
    height, width = 120, 160
    decoded = Planes(*rgb_to_i420_cpu(_picture(height, width, seed=2)))
    before = i420_to_rgb_cpu(*decoded)
    after = before.copy()
    after[11:47, 21:77] = (10, 200, 30)
    after[80:113, 101:150] //= 2
    label = Box(120, 100, 150, 116)
    after[label.top : label.bottom, label.left : label.right] = 255
    merged = merged_i420(decoded, before, after, [label])
    expected = Planes(*(plane.copy() for plane in decoded))
    for box in changed_boxes(before, after):
        write_box(expected, box, patched_box(decoded, before, after, box))
    write_box(expected, label, patched_box(decoded, before, after, label, whole=True))
    for got, want in zip(merged, expected):
        np.testing.assert_array_equal(got, want)


def test_even_box_clips_and_aligns() -> None:
    assert even_box(-3, 5, 11, 12, 10, 20) == Box(0, 4, 10, 12)
    assert even_box(12, 0, 20, 4, 10, 20) is None


def test_a_patch_keeps_the_decoders_bits_wherever_the_picture_did_not_change() -> None:
    height, width = 64, 96
    decoded = Planes(*rgb_to_i420_cpu(_picture(height, width, seed=1)))
    before = i420_to_rgb_cpu(*decoded)
    after = before.copy()
    after[10:30, 20:41] = (200, 40, 90)  # ends on an odd column: half a chroma block changed
    box = changed_boxes(before, after)[0]
    patch = patched_box(decoded, before, after, box)
    converted = rgb_to_i420_cpu(np.ascontiguousarray(after[box.top : box.bottom, box.left : box.right]))
    changed = (before != after).any(axis=2)[box.top : box.bottom, box.left : box.right]
    decoded_y = decoded.y[box.top : box.bottom, box.left : box.right]
    np.testing.assert_array_equal(patch.y[changed], converted[0][changed])
    np.testing.assert_array_equal(patch.y[~changed], decoded_y[~changed])
    blocks = changed.reshape(changed.shape[0] // 2, 2, -1, 2).any(axis=(1, 3))
    decoded_u = decoded.u[box.top // 2 : box.bottom // 2, box.left // 2 : box.right // 2]
    np.testing.assert_array_equal(patch.u[~blocks], decoded_u[~blocks])
    np.testing.assert_array_equal(patch.u[blocks], converted[1][blocks])
    whole = patched_box(decoded, before, after, box, whole=True)
    np.testing.assert_array_equal(whole.y, converted[0])
