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


def glasses_frame(image: Frame, mesh: Points) -> Frame:
    """A dark glasses frame, its rims 3 % of the face height thick: a rounded rim around each eye (over
    the brows' lower edge above, the cheek's top below), a bridge over the nose and the temples running
    out to the face's sides."""
    height, painted = _height(mesh), image.copy()
    thickness = max(1, round(0.03 * height))
    colour = (25, 25, 28)
    rims = []
    # (eye corners, lid top, lid bottom), the face's side it faces, and which way that is in the image
    for eye, outer, outward in (((33, 133, 159, 145), 234, -1.0), ((263, 362, 386, 374), 454, 1.0)):
        corner_a, corner_b, top, bottom = (mesh[i, :2] for i in eye)
        centre = (corner_a + corner_b) / 2 + np.array([0.0, 0.01 * height])
        half_width = 0.62 * float(np.linalg.norm(corner_a - corner_b)) + 0.03 * height
        half_height = 0.55 * float(np.linalg.norm(top - bottom)) + 0.07 * height
        axes = (round(half_width), round(half_height))
        cv2.ellipse(painted, _pt(centre), axes, 0.0, 0.0, 360.0, colour, thickness, cv2.LINE_AA)
        side = centre + np.array([outward * half_width, -0.02 * height])
        cv2.line(painted, _pt(side), _pt(mesh[outer, :2]), colour, thickness, cv2.LINE_AA)
        rims.append(centre + np.array([-outward * half_width, -0.02 * height]))
    cv2.line(painted, _pt(rims[0]), _pt(rims[1]), colour, thickness, cv2.LINE_AA)
    return painted


def lower_cheek_patch(image: Frame, mesh: Points) -> Frame:
    """A dark patch (a hand's shadow, a microphone) 12 % of the face height across, on the subject's right
    lower cheek beside the mouth corner, centred below the nose's base (clear of the lips' own margin)."""
    return beard_zone_patch(image, mesh, "right", (-0.1, -0.05), 0.06)


def beard_zone_patch(
    image: Frame, mesh: Points, side: str, offset: tuple[float, float], radius: float
) -> Frame:
    """A dark disc of `radius` (share of the face height) beside the mouth corner of the subject's
    `side` ("right": image-left), its centre `offset` (x outwards from the mouth as negative, y down)
    in shares of the face height: the beard zone's one-sided occluders of issue 18, anywhere on it."""
    height, painted = _height(mesh), image.copy()
    corner, outward = (mesh[61, :2], 1.0) if side == "right" else (mesh[291, :2], -1.0)
    centre = corner + np.array([offset[0] * outward, offset[1]]) * height
    cv2.circle(painted, _pt(centre), round(radius * height), (38, 30, 26), -1)
    return painted


def side_light(image: Frame, mesh: Points, shadow_on_left: bool, floor: float = 0.3) -> Frame:
    """`image` lit from one side, as by a window or a desk lamp beside the face: brightness falls from
    full on the lit side to `floor` on the other over the middle of the face, whatever lies there (not
    an occluder: the case the occlusion mask must leave alone). `shadow_on_left`: the image's left."""
    columns = np.arange(image.shape[1], dtype=np.float32)
    centre, width = float(mesh[:, 0].mean()), float(np.ptp(mesh[:, 0]))
    towards_light = (columns - centre) if shadow_on_left else (centre - columns)
    lit = np.clip((towards_light + 0.15 * width) / (0.4 * width), 0.0, 1.0)
    gain = floor + (1.0 - floor) * lit * lit * (3.0 - 2.0 * lit)
    return np.clip(image.astype(np.float32) * gain[None, :, None], 0, 255).astype(np.uint8)


def _skin_colour(image: Frame, mesh: Points) -> NDArray[np.float32]:
    """The face's own skin colour (median over both cheeks), RGB float."""
    height = _height(mesh)
    samples = []
    for index in (50, 280):  # the cheeks' centres
        x, y = _pt(mesh[index, :2])
        r = max(2, round(0.04 * height))
        samples.append(image[max(0, y - r) : y + r, max(0, x - r) : x + r].reshape(-1, 3))
    return np.median(np.concatenate(samples), axis=0).astype(np.float32)


def hand(image: Frame, mesh: Points, shift: tuple[float, float] = (0.0, 0.0)) -> Frame:
    """A skin-toned hand (the face's own skin colour, a little pinker) raised from below the subject's
    right jaw, its palm on the jaw and four fingers side by side reaching up across the mouth and the
    cheek, the thumb along the chin: shaded fingers with dark outlines, creases between them and at the
    knuckles, a highlight along each, a palm darker at its rim and the wrist going down. `shift` moves the
    hand by (x, y) shares of the face height (a hand raised, sliding across the face)."""
    height = _height(mesh)
    skin = _skin_colour(image, mesh) * np.array([1.06, 0.97, 0.95], np.float32)
    finger_w = 0.085 * height
    palm_top = mesh[172, :2] + np.array([0.06 + shift[0], -0.02 + shift[1]]) * height  # the knuckles' middle
    along = np.array([0.5, -1.0]) / np.hypot(0.5, 1.0)  # towards the fingertips: up, to the face's left
    across = np.array([-along[1], along[0]])  # from the little finger to the index
    layer = np.zeros(image.shape, np.float32)
    cover = np.zeros(image.shape[:2], np.float32)

    def colour(shade: float) -> tuple[float, float, float]:
        tone = np.minimum(skin * shade, 255.0)
        return float(tone[0]), float(tone[1]), float(tone[2])

    def capsule(a: NDArray[np.floating], b: NDArray[np.floating], shade: float, width: float) -> None:
        cv2.line(layer, _pt(a), _pt(b), colour(shade), max(1, round(width)), cv2.LINE_AA)
        cv2.line(cover, _pt(a), _pt(b), 1.0, max(1, round(width)), cv2.LINE_AA)

    def polygon(points: NDArray[np.floating], shade: float) -> None:
        corners = np.round(points).astype(np.int32)
        cv2.fillPoly(layer, [corners], colour(shade), cv2.LINE_AA)
        cv2.fillPoly(cover, [corners], 1.0, cv2.LINE_AA)

    palm_w, palm_l = 4.0 * finger_w, 0.36 * height
    # the wrist and the palm, darker at the rim
    wrist = palm_top - along * (palm_l + 0.3 * height)
    wrist_half = across * palm_w * 0.38
    polygon(np.array([wrist - wrist_half, wrist + wrist_half, palm_top - along * palm_l + wrist_half * 1.2, palm_top - along * palm_l - wrist_half * 1.2]), 0.8)  # fmt: skip
    for inset, shade in ((0.0, 0.7), (0.1, 0.88), (0.25, 0.97)):
        half = across * palm_w * (0.5 - inset * 0.5)
        top, bottom = (
            palm_top - along * inset * 0.2 * height,
            palm_top - along * (palm_l * (1.0 - inset * 0.4)),
        )
        polygon(np.array([bottom - half * 0.85, bottom + half * 0.85, top + half, top - half]), shade)
    # the thumb: from the palm's index side, bent along the chin
    thumb_root = palm_top - along * palm_l * 0.7 + across * palm_w * 0.45
    thumb_joint = thumb_root + (along * 0.55 + across * 0.6) * 0.14 * height
    thumb_tip = thumb_joint + (along * 0.85 + across * 0.2) * 0.12 * height
    fingers = [(thumb_root, thumb_joint), (thumb_joint, thumb_tip)]
    for offset, length in ((-1.5, 0.27), (-0.5, 0.35), (0.5, 0.37), (1.5, 0.33)):
        base = palm_top + across * offset * finger_w
        fingers.append((base, base + (along + across * offset * 0.04) * length * height))
    for base, tip in fingers:
        capsule(base, tip, 0.6, finger_w)  # the outline and the crease to the next finger
        capsule(base, tip, 0.9, finger_w * 0.8)
        capsule(base + across * finger_w * 0.12, tip + across * finger_w * 0.12, 1.08, finger_w * 0.25)
    for base, tip in fingers[2:]:
        for at in (0.4, 0.7):  # the knuckle creases
            middle, half = base + (tip - base) * at, across * finger_w * 0.3
            cv2.line(layer, _pt(middle - half), _pt(middle + half), colour(0.68), 1, cv2.LINE_AA)
        cv2.circle(layer, _pt(base + (tip - base) * 0.9), max(1, round(finger_w * 0.22)), colour(1.12), -1, cv2.LINE_AA)  # fmt: skip
    cover = np.clip(cover, 0.0, 1.0)[..., None]
    blended = image.astype(np.float32) * (1.0 - cover) + layer * cover
    return np.asarray(np.clip(blended + 0.5, 0, 255), np.uint8)


PAINTERS: dict[str, Painter] = {
    "microphone": microphone,
    "phone": phone,
    "cup": cup,
}
