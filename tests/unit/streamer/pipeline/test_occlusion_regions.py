"""occlusion_regions.followed: a thin occluder is followed along itself into a feature, a broad one is not
(its reach into a feature is bridged's), and nothing unconnected is taken."""

import cv2
import numpy as np

from streamer.pipeline.swap_engines.occlusion_regions import FOLLOW, followed

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
