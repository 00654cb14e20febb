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


def panning_face_frames(photo: Frame, width: int, height: int, count: int) -> list[Frame]:
    """`count` frames of TARGET_PHOTO's face, a third of the frame wide, panning like a handheld webcam."""
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
