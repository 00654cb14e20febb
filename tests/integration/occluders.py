"""Occluders painted on a face photo, placed by its mesh: what people hold in front of their face in a call."""

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
    return int(round(float(point[0]))), int(round(float(point[1])))


def microphone(image: Frame, mesh: Points) -> Frame:
    """A dark grey microphone head over the subject's right mouth corner, its handle going down."""
    height, painted = _height(mesh), image.copy()
    head = mesh[61, :2] + np.array([-0.02, 0.05]) * height
    cv2.line(painted, _pt(head), _pt(head + np.array([-0.05, 0.45]) * height), (20, 20, 22), int(0.08 * height))
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


def glasses_frame(image: Frame, mesh: Points) -> Frame:
    """A thick black glasses frame: a rim around each eye and the bridge across the nose."""
    height, painted = _height(mesh), image.copy()
    thickness = max(2, int(0.03 * height))
    for corner_out, corner_in in ((33, 133), (263, 362)):
        centre = (mesh[corner_out, :2] + mesh[corner_in, :2]) / 2.0
        half_width = abs(float(mesh[corner_out, 0] - mesh[corner_in, 0])) / 2.0 + 0.06 * height
        axes = (int(half_width), int(0.1 * height))
        cv2.ellipse(painted, _pt(centre), axes, 0.0, 0.0, 360.0, (18, 18, 20), thickness, cv2.LINE_AA)
    cv2.line(painted, _pt(mesh[133, :2]), _pt(mesh[362, :2]), (18, 18, 20), thickness, cv2.LINE_AA)
    return painted


def skin_hand(image: Frame, mesh: Points) -> Frame:
    """A hand in a warmer, lighter skin tone than the face, palm on the subject's left cheek and four
    fingers reaching up over the temple."""
    height, painted = _height(mesh), image.copy()
    tone = (236, 188, 160)
    palm = mesh[425, :2] + np.array([0.04, 0.05]) * height
    cv2.ellipse(painted, _pt(palm), (int(0.13 * height), int(0.16 * height)), 10.0, 0, 360, tone, -1, cv2.LINE_AA)
    for index in range(4):
        base = palm + np.array([-0.09 + 0.06 * index, -0.1]) * height
        tip = base + np.array([0.02 * (index - 1.5), -0.22]) * height
        cv2.line(painted, _pt(base), _pt(tip), tone, int(0.05 * height), cv2.LINE_AA)
    return painted


PAINTERS: dict[str, Painter] = {
    "microphone": microphone,
    "phone": phone,
    "cup": cup,
    "glasses frame": glasses_frame,
    "skin-toned hand": skin_hand,
}
