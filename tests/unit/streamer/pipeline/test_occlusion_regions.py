"""occlusion_regions.followed: a thin occluder is followed along itself into a feature, a broad one is not
(its reach into a feature is bridged's), and nothing unconnected is taken. occlusion_regions.bridged: a
broad occluder running across a feature takes it, a thin ring around one (a glasses rim) does not."""

import cv2
import numpy as np

from streamer.pipeline.swap_engines.occlusion_regions import FOLLOW, bridged, followed

FACE_HEIGHT = 60.0  # the occlusion mask's working size


def test_a_thin_rim_is_followed_around_its_arc_into_a_feature() -> None:
    found = np.zeros((60, 60), np.float32)
    candidates = np.zeros((60, 60), np.uint8)
    # a rim's lower half found outside the feature, its upper arc a candidate inside it
    cv2.ellipse(found, (30, 30), (12, 8), 0.0, 0.0, 180.0, 1.0, 2)
    cv2.ellipse(candidates, (30, 30), (12, 8), 0.0, 180.0, 360.0, 1, 2)
    cv2.circle(candidates, (30, 50), 3, 1, -1)  # dark, but not joined to the rim
    taken = followed(found, candidates > 0, FACE_HEIGHT)
    assert taken[22, 30] == 1.0  # the top of the arc: a quarter rim from each end
    assert taken[50, 30] == 0.0 and not (taken * found).any()


def test_a_broad_occluder_is_not_followed_along_a_brow() -> None:
    found = np.zeros((60, 60), np.float32)
    candidates = np.zeros((60, 60), np.uint8)
    found[5:55, 10:25] = 1.0  # a bar a quarter of the face wide
    candidates[20:23, 25:50] = 1  # a dark brow beside it
    assert not followed(found, candidates > 0, FACE_HEIGHT).any()


def test_a_thin_occluder_is_followed_no_further_than_follow() -> None:
    found = np.zeros((60, 120), np.float32)
    candidates = np.zeros((60, 120), np.uint8)
    found[30:32, 0:10] = 1.0
    candidates[30:32, 10:120] = 1
    taken = followed(found, candidates > 0, FACE_HEIGHT)
    reach = int(np.nonzero(taken.any(axis=0))[0].max()) - 9
    assert abs(reach - round(FOLLOW * FACE_HEIGHT)) <= 1


def test_a_broad_bar_across_an_eye_takes_the_eye_between_its_parts() -> None:
    found = np.zeros((60, 60), np.float32)
    candidates = np.zeros((60, 60), np.uint8)
    found[20:32, 5:22] = 1.0  # a bar a fifth of the face high, cut by the eye's protection...
    found[20:32, 34:55] = 1.0  # ...on both sides of it
    candidates[22:30, 22:34] = 1  # its part over the eye, dark
    opening = np.zeros((60, 60), np.uint8)
    cv2.ellipse(opening, (28, 26), (6, 3), 0.0, 0.0, 360.0, 1, -1)
    taken = bridged(found, candidates > 0, FACE_HEIGHT, opening > 0)
    assert taken[22:30, 22:34].all()


def test_a_thin_rim_around_an_eye_does_not_take_the_eye_inside_it() -> None:
    """A glasses rim 3 % of the face height thick around an eye: the lens inside is not a gap of the
    occluder, the dark eye in it stays a feature; a broad occluder there would take it."""
    found = np.zeros((60, 60), np.float32)
    candidates = np.zeros((60, 60), np.uint8)
    cv2.ellipse(found, (30, 30), (12, 8), 0.0, 0.0, 360.0, 1.0, 2)
    cv2.ellipse(candidates, (30, 30), (5, 2), 0.0, 0.0, 360.0, 1, -1)  # the eye's lashes and pupil
    opening = cv2.dilate(candidates, np.ones((3, 3), np.uint8)) > 0
    assert not bridged(found, candidates > 0, FACE_HEIGHT, opening).any()
    broad = found.copy()
    broad[36:46, 14:46] = 1.0  # a hand's edge below the eye
    assert bridged(broad, candidates > 0, FACE_HEIGHT, opening)[30, 30] == 1.0
