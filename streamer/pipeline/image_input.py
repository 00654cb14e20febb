"""Decoding untrusted image bytes: sniff the format, read the declared size, refuse bombs and truncations,
and find where the image ends by walking its own structure (trailing bytes, as in a motion photo, are
fine; an image cut short is not).

Every image that reaches livefuse from outside (a CLI path, an upload) goes through `decode_image`, so
the limits are checked in one place and before any pixel is decoded: OpenCV happily decodes half a JPEG
(grey bottom) and allocates whatever a PNG header declares.
"""

import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import cv2
import numpy as np

from gpu_ops.errors import InvalidInputError
from models.face import Frame

logger = logging.getLogger(__name__)

ImageFormat = Literal["jpeg", "png", "webp"]

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_MAX_PIXELS = 40_000_000


class UnsupportedImageError(InvalidInputError):
    """The bytes are not a JPEG, PNG or WebP image."""


class ImageTooLargeError(InvalidInputError):
    """The file or its declared pixel count is over the limit."""


@dataclass(frozen=True)
class ImageHeader:
    format: ImageFormat
    width: int
    height: int


def sniff_format(data: bytes) -> ImageFormat:
    """The format from the magic bytes alone; the file name or Content-Type is never trusted."""
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    raise UnsupportedImageError("not a JPEG, PNG or WebP image (checked by content)")


def _jpeg_size(data: bytes) -> tuple[int, int]:
    position = 2
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            raise InvalidInputError("corrupt JPEG: bad marker")
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            position += 2
            continue
        (length,) = struct.unpack(">H", data[position + 2 : position + 4])
        # SOF0..SOF15 except DHT (C4), JPG (C8), DAC (CC) carry the frame size
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if position + 9 > len(data):
                break
            height, width = struct.unpack(">HH", data[position + 5 : position + 9])
            return width, height
        position += 2 + length
    raise InvalidInputError("truncated JPEG: no frame header")


def _png_size(data: bytes) -> tuple[int, int]:
    if len(data) < 24 or data[12:16] != b"IHDR":
        raise InvalidInputError("truncated PNG: no IHDR chunk")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _webp_size(data: bytes) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return width, height
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    raise InvalidInputError("truncated or unknown WebP header")


def read_header(data: bytes) -> ImageHeader:
    """Format and declared size, from the header only."""
    image_format = sniff_format(data)
    size_of = {"jpeg": _jpeg_size, "png": _png_size, "webp": _webp_size}[image_format]
    width, height = size_of(data)
    if width <= 0 or height <= 0:
        raise InvalidInputError(f"{image_format} declares an empty image ({width}x{height})")
    return ImageHeader(image_format, width, height)


def _jpeg_end(data: bytes) -> int:
    """Where the JPEG ends: its segments are walked by their lengths and its entropy-coded scans to the
    next marker, up to the end-of-image marker (an EXIF thumbnail's own marker, inside APP1, is skipped)."""
    position = 2
    while position + 2 <= len(data):
        if data[position] != 0xFF:
            raise InvalidInputError("corrupt JPEG: bad marker")
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker == 0xD9:
            return position + 2
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            position += 2
            continue
        if position + 4 > len(data):
            break
        (length,) = struct.unpack(">H", data[position + 2 : position + 4])
        position += 2 + length
        if marker == 0xDA:  # a scan: entropy-coded bytes up to the next marker that is not FF00 or RSTn
            position = _next_marker(data, position)
    raise InvalidInputError("truncated JPEG: no end-of-image marker")


def _next_marker(data: bytes, position: int) -> int:
    while (position := data.find(b"\xff", position)) != -1 and position + 1 < len(data):
        following = data[position + 1]
        if following != 0x00 and not 0xD0 <= following <= 0xD7 and following != 0xFF:
            return position
        position += 1 if following == 0xFF else 2
    return len(data)


def _png_end(data: bytes) -> int:
    """Where the PNG ends: its chunks are walked by their lengths up to IEND."""
    position = 8
    while position + 8 <= len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        position += 12 + length  # length, type, body, CRC
        if kind == b"IEND" and position <= len(data):
            return position
    raise InvalidInputError("truncated PNG: no IEND chunk")


def _webp_end(data: bytes) -> int:
    (riff_size,) = struct.unpack("<I", data[4:8])
    if len(data) < riff_size + 8:
        raise InvalidInputError("truncated WebP: shorter than its RIFF size")
    return riff_size + 8


def image_end(data: bytes, image_format: ImageFormat) -> int:
    """The length of the image itself, from its own structure; bytes after it are not the image's (a
    motion photo's video after its JPEG, metadata a tool appended after a PNG) and are not decoded.
    InvalidInputError when the structure stops before its end: a truncated file (OpenCV would decode
    half a JPEG with a grey bottom and call it a success)."""
    return {"jpeg": _jpeg_end, "png": _png_end, "webp": _webp_end}[image_format](data)


def decode_image(
    data: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES, max_pixels: int = DEFAULT_MAX_PIXELS
) -> Frame:
    """RGB uint8 pixels of a JPEG/PNG/WebP, or InvalidInputError saying what is wrong with it."""
    if len(data) > max_bytes:
        raise ImageTooLargeError(f"image is {len(data)} bytes; the limit is {max_bytes} bytes")
    if not data:
        raise UnsupportedImageError("empty file: not an image")
    header = read_header(data)
    if header.width * header.height > max_pixels:
        raise ImageTooLargeError(
            f"{header.format} declares {header.width}x{header.height} = {header.width * header.height} pixels;"
            f" the limit is {max_pixels}"
        )
    end = image_end(data, header.format)
    if end < len(data):
        logger.debug("%s with %d bytes after its end: decoded without them", header.format, len(data) - end)
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8, count=end), cv2.IMREAD_COLOR)
    if decoded is None:
        raise InvalidInputError(f"corrupt {header.format}: the decoder could not read it")
    return np.ascontiguousarray(cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB))


def read_image_file(path: str | Path, **limits: int) -> Frame:
    """`decode_image` for a path, with the path in the error message."""
    file_path = Path(path)
    try:
        data = file_path.read_bytes()
    except OSError as error:
        raise InvalidInputError(f"cannot read {file_path}: {error.strerror or error}") from None
    try:
        return decode_image(data, **limits)
    except InvalidInputError as error:
        raise type(error)(f"{file_path}: {error}") from None
