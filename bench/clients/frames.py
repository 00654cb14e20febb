"""The frames and photos every benchmark feeds: a real face panning like a handheld webcam.

One place, so `bench`, `bench --live`, `bench --whip` and `bench --soak` measure the same input.
"""

import argparse
import os
import platform
from pathlib import Path

import cv2
import numpy as np

from gpu_ops.errors import InvalidInputError
from models.face import Frame

TARGET_PHOTO = "fr_obama.jpg"
SOURCE_PHOTO = "fr_biden2.jpg"
# YuNet's box of the face in TARGET_PHOTO (shared/models MANIFEST): frames are cut around it so the face
# stays clear of the stamp strip at the top, which a swap would otherwise overwrite.
TARGET_FACE_BOX = (371, 85, 607, 421)


def machine_description() -> str:
    """What a benchmark row names as its machine."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def source_upload(media: Path) -> tuple[bytes, str]:
    """SOURCE_PHOTO as the daemon benches upload it: its bytes and Content-Type."""
    path = media / SOURCE_PHOTO
    return path.read_bytes(), "image/png" if path.suffix.lower() == ".png" else "image/jpeg"


def media_dir_from_args(args: argparse.Namespace) -> Path:
    value = args.media_dir or os.environ.get("LIVEFUSE_MEDIA")
    if not value:
        raise InvalidInputError("bench needs face photos: pass --media-dir DIR or set LIVEFUSE_MEDIA")
    return Path(value)


DEFAULT_FACE_SHARE = 1 / 3  # the face a third of the frame wide: the frames every benchmark fed until now
FACE_SHARE_RANGE = (0.02, 0.9)


def check_face_share(face_share: float) -> float:
    """`face_share` itself when it is a share of the frame's width a face can take; else a clear error."""
    low, high = FACE_SHARE_RANGE
    if not low <= face_share <= high:
        raise InvalidInputError(
            f"face size must be a share of the frame's width in [{low}, {high}], got {face_share}"
        )
    return face_share


def face_size_from_args(args: argparse.Namespace) -> float:
    """`--face-size` of a bench command (absent: the default share), validated."""
    share = getattr(args, "face_size", None)
    return check_face_share(DEFAULT_FACE_SHARE if share is None else share)


def face_size_label(face_share: float) -> str:
    """How a benchmark's header names the face's size in the frame."""
    return f"face {face_share * 100:.0f} % of the width"


def panning_face_frames(
    photo: Frame, width: int, height: int, count: int, face_share: float = DEFAULT_FACE_SHARE
) -> list[Frame]:
    """`count` frames of TARGET_PHOTO's face, `face_share` of the frame wide, panning like a handheld
    webcam. The default share gives the frames every benchmark fed before the share was a parameter, bit
    for bit; another share scales the photo first and repeats its edges (BORDER_REPLICATE) where the
    frame reaches past them, so a small face in a large frame costs no giant crop."""
    if check_face_share(face_share) == DEFAULT_FACE_SHARE:
        return _photo_crops(photo, width, height, count)
    x1, y1, x2, y2 = TARGET_FACE_BOX
    scale = width * face_share / (x2 - x1)
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    scaled = np.asarray(cv2.resize(photo, None, fx=scale, fy=scale, interpolation=interpolation), np.uint8)
    centre_x, centre_y = (x1 + x2) / 2 * scale, (y1 + y2) / 2 * scale
    frames: list[Frame] = []
    for index in range(count):
        phase = 2 * np.pi * index / count
        left = round(centre_x + 0.08 * width * np.sin(phase) - width / 2)
        top = round(centre_y + 0.04 * height * np.cos(phase) - height / 2)
        frames.append(_window(scaled, left, top, width, height))
    return frames


def _window(image: Frame, left: int, top: int, width: int, height: int) -> Frame:
    """The `width` x `height` window of `image` at (left, top), its edges repeated outside the image."""
    inside_left, inside_top = max(left, 0), max(top, 0)
    inside_right = min(left + width, image.shape[1])
    inside_bottom = min(top + height, image.shape[0])
    inside = image[inside_top:inside_bottom, inside_left:inside_right]
    window = cv2.copyMakeBorder(
        inside,
        inside_top - top,
        top + height - inside_bottom,
        inside_left - left,
        left + width - inside_right,
        cv2.BORDER_REPLICATE,
    )
    return np.ascontiguousarray(window, dtype=np.uint8)


def _photo_crops(photo: Frame, width: int, height: int, count: int) -> list[Frame]:
    """The default share's frames: crops of the photo three face widths wide, scaled to the frame."""
    x1, y1, x2, y2 = TARGET_FACE_BOX
    crop_width = min(3 * (x2 - x1), photo.shape[1])
    crop_height = min(round(crop_width * height / width), photo.shape[0])
    centre_x, centre_y = (x1 + x2) / 2, (y1 + y2) / 2
    frames: list[Frame] = []
    for index in range(count):
        phase = 2 * np.pi * index / count
        left = centre_x + 0.08 * crop_width * np.sin(phase) - crop_width / 2
        top = centre_y + 0.04 * crop_height * np.cos(phase) - crop_height / 2
        left = int(np.clip(left, 0, photo.shape[1] - crop_width))
        top = int(np.clip(top, 0, photo.shape[0] - crop_height))
        crop = photo[top : top + crop_height, left : left + crop_width]
        scaled = cv2.resize(crop, (width, height), interpolation=cv2.INTER_AREA)
        frames.append(np.ascontiguousarray(scaled, dtype=np.uint8))
    return frames
