"""Occluders painted on a face photo, placed by its mesh: what people hold in front of their face in a call
(the occlusion tests and docs/images/mesh_target_occlusion.png use them)."""

from collections.abc import Callable

import cv2
import numpy as np
from numpy.typing import NDArray

from models.face import Frame

Points = NDArray[np.float32]
Painter = Callable[[Frame, Points], Frame]


def _height(mesh: Points) -> float:
    return float(np.linalg.norm(mesh[10, :2] - mesh[152, :2]))


def _pt(point: NDArray[np.floating]) -> tuple[int, int]:
    return round(float(point[0])), round(float(point[1]))


def microphone(image: Frame, mesh: Points) -> Frame:
    """A dark grey microphone head over the subject's right mouth corner, its handle going down."""
    height, painted = _height(mesh), image.copy()
    head = mesh[61, :2] + np.array([-0.02, 0.05]) * height
    cv2.line(
        painted, _pt(head), _pt(head + np.array([-0.05, 0.45]) * height), (20, 20, 22), int(0.08 * height)
    )
    cv2.circle(painted, _pt(head), int(0.1 * height), (55, 55, 58), -1, cv2.LINE_AA)
    return painted


def phone(image: Frame, mesh: Points) -> Frame:
    """A black phone held against the subject's left cheek and jaw, slightly tilted."""
    height, painted = _height(mesh), image.copy()
    centre = (mesh[454, :2] + mesh[288, :2]) / 2.0 + np.array([-0.05, 0.02]) * height
    box = cv2.boxPoints(((float(centre[0]), float(centre[1])), (0.2 * height, 0.42 * height), -12.0))
    cv2.fillPoly(painted, [np.round(box).astype(np.int32)], (28, 30, 36), cv2.LINE_AA)
    return painted


def cup(image: Frame, mesh: Points) -> Frame:
    """A white cup raised to the subject's right jaw and chin."""
    height, painted = _height(mesh), image.copy()
    top_left = mesh[172, :2] + np.array([-0.02, -0.12]) * height
    bottom_right = top_left + np.array([0.28, 0.4]) * height
    cv2.rectangle(painted, _pt(top_left), _pt(bottom_right), (232, 230, 224), -1, cv2.LINE_AA)
    return painted


def lower_cheek_patch(image: Frame, mesh: Points) -> Frame:
    """A dark patch (a hand's shadow, a microphone) 12 % of the face height across, on the subject's right
    lower cheek beside the mouth corner, centred below the nose's base (clear of the lips' own margin)."""
    height, painted = _height(mesh), image.copy()
    centre = mesh[61, :2] + np.array([-0.1, -0.05]) * height
    cv2.circle(painted, _pt(centre), round(0.06 * height), (38, 30, 26), -1)
    return painted


PAINTERS: dict[str, Painter] = {
    "microphone": microphone,
    "phone": phone,
    "cup": cup,
}
