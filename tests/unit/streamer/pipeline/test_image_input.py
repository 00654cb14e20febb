import struct
import zlib

import cv2
import numpy as np
import pytest

from gpu_ops.errors import InvalidInputError
from streamer.pipeline.image_input import (
    ImageTooLargeError,
    UnsupportedImageError,
    decode_image,
    read_header,
    read_image_file,
)


def _encoded(extension: str, width: int = 64, height: int = 48) -> bytes:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    ok, data = cv2.imencode(extension, image)
    assert ok
    return data.tobytes()


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


@pytest.mark.parametrize("extension,kind", [(".jpg", "jpeg"), (".png", "png"), (".webp", "webp")])
def test_header_and_decode_of_each_format(extension: str, kind: str) -> None:
    data = _encoded(extension, 64, 48)
    header = read_header(data)
    assert (header.format, header.width, header.height) == (kind, 64, 48)
    image = decode_image(data)
    assert image.shape == (48, 64, 3) and image.dtype == np.uint8


def test_decoded_pixels_are_rgb() -> None:
    bgr = np.zeros((8, 8, 3), np.uint8)
    bgr[..., 2] = 255  # red in OpenCV's BGR order
    ok, data = cv2.imencode(".png", bgr)
    assert ok
    assert decode_image(data.tobytes())[0, 0].tolist() == [255, 0, 0]


@pytest.mark.parametrize("extension", [".jpg", ".png", ".webp"])
def test_truncated_image_is_refused(extension: str) -> None:
    data = _encoded(extension, 128, 96)
    with pytest.raises(InvalidInputError, match="truncated|corrupt"):
        decode_image(data[: len(data) // 2])


@pytest.mark.parametrize(
    "data", [b"", b"hello world", b"<svg xmlns='http://www.w3.org/2000/svg'></svg>", b"<html></html>"]
)
def test_non_images_are_refused_by_content(data: bytes) -> None:
    with pytest.raises(UnsupportedImageError):
        decode_image(data)


def test_png_bomb_is_refused_before_decoding() -> None:
    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    bomb = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IEND", b"")
    with pytest.raises(ImageTooLargeError, match="10000000000 pixels"):
        decode_image(bomb)


def test_byte_limit() -> None:
    with pytest.raises(ImageTooLargeError, match="limit"):
        decode_image(_encoded(".png"), max_bytes=100)


def test_read_image_file_names_the_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = tmp_path / "face.jpg"
    text.write_text("this is text, not a JPEG")
    with pytest.raises(UnsupportedImageError, match="face.jpg"):
        read_image_file(text)
    with pytest.raises(InvalidInputError, match="cannot read"):
        read_image_file(tmp_path / "missing.jpg")


MP4_TAIL = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + bytes(range(256)) * 64


def test_a_motion_photo_jpeg_with_its_video_after_the_image_is_decoded() -> None:
    """A phone's motion photo: a whole JPEG, then an MP4 (the bytes end in video, not FFD9)."""
    data = _encoded(".jpg", 64, 48)
    image = decode_image(data + MP4_TAIL)
    assert image.shape == (48, 64, 3)
    assert np.array_equal(image, decode_image(data))


def test_a_png_with_trailing_bytes_is_decoded() -> None:
    data = _encoded(".png", 64, 48)
    assert np.array_equal(decode_image(data + b"appended by some tool\n" * 10), decode_image(data))


def test_a_truncated_jpeg_is_refused_even_when_its_exif_thumbnail_is_whole() -> None:
    """The thumbnail inside APP1 has its own end marker; the walk skips it, so the cut is still seen."""
    thumbnail = _encoded(".jpg", 16, 16)
    app1 = b"Exif\x00\x00" + thumbnail
    main = _encoded(".jpg", 128, 96)
    data = main[:2] + b"\xff\xe1" + struct.pack(">H", len(app1) + 2) + app1 + main[2:]
    assert decode_image(data).shape == (96, 128, 3)
    with pytest.raises(InvalidInputError, match="truncated JPEG"):
        decode_image(data[: len(data) - len(main) // 2])


@pytest.mark.parametrize("extension", [".jpg", ".png"])
def test_a_truncated_image_followed_by_other_bytes_is_still_refused(extension: str) -> None:
    data = _encoded(extension, 128, 96)
    with pytest.raises(InvalidInputError, match="truncated|corrupt"):
        decode_image(data[: len(data) // 2] + MP4_TAIL)
