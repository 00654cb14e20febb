"""Provenance: a visible label on swapped output frames (`serve --label "AI"`) and one structured audit
line per session event (who, when, which source image, which engine).

The label is a small high-contrast box (white text on black, white rim) drawn bottom-right AFTER the swap,
so nothing the models do can hide it; the top-left frame-stamp strip (512x16, `streamer.outputs.frame_stamp`)
is never touched, so latency measurement keeps working on labelled streams. The audit line goes to the
normal structured log with `event="audit"`: grep one key to get every session's record.
"""

import datetime
import functools
import logging
from dataclasses import asdict, dataclass
from typing import Any, Literal

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import is_device_array, require_cupy
from gpu_ops.errors import InvalidInputError
from models.face import Frame
from streamer.outputs.frame_stamp import STAMP_HEIGHT, STAMP_WIDTH

logger = logging.getLogger(__name__)

MAX_LABEL_CHARS = 32
FONT = cv2.FONT_HERSHEY_SIMPLEX
TEXT_COLOUR = (255, 255, 255)
BOX_COLOUR = (0, 0, 0)
MIN_TEXT_HEIGHT = 10  # px: smaller is unreadable after a video codec
TEXT_HEIGHT_FRACTION = 1 / 24  # of the frame height: about 20 px at 480p, 30 px at 720p

AuditAction = Literal["session_created", "source_set"]
Box = tuple[int, int, int, int]


def check_label(text: str) -> str:
    """The label if drawable (printable ASCII, 1..32 chars: the Hershey font has no other glyphs)."""
    if not text or len(text) > MAX_LABEL_CHARS:
        raise InvalidInputError(f"label must be 1 to {MAX_LABEL_CHARS} characters, got {len(text)}")
    if not all(" " <= character <= "~" for character in text):
        raise InvalidInputError(f"label must be printable ASCII, got {text!r}")
    return text


def _font_metrics(text: str, frame_height: int) -> tuple[float, int, int, int, int]:
    """(font scale, thickness, text width, text height, baseline) for `text` on a frame this tall."""
    target_height = max(MIN_TEXT_HEIGHT, round(frame_height * TEXT_HEIGHT_FRACTION))
    (_, unit_height), _ = cv2.getTextSize(text, FONT, 1.0, 1)
    scale = target_height / max(unit_height, 1)
    thickness = max(1, round(scale * 1.5))
    (width, height), baseline = cv2.getTextSize(text, FONT, scale, thickness)
    return scale, thickness, width, height, baseline


def label_box(text: str, width: int, height: int) -> Box:
    """Where the label goes on a width x height frame: x1, y1, x2, y2 (exclusive), bottom-right,
    clear of the top-left stamp strip."""
    _, _, text_width, text_height, baseline = _font_metrics(text, height)
    padding = max(3, text_height // 3)
    margin = max(4, text_height // 2)
    x2 = width - margin
    y2 = height - margin
    x1 = max(0, x2 - text_width - 2 * padding)
    y1 = max(0, y2 - text_height - baseline - 2 * padding)
    if x1 < STAMP_WIDTH and y1 < STAMP_HEIGHT:
        y1 = min(STAMP_HEIGHT, y2)  # a tiny frame: the label gives way to the stamp
    return x1, y1, max(x1, x2), max(y1, y2)


@functools.lru_cache(maxsize=16)
def rendered_label(text: str, width: int, height: int) -> tuple[Box, NDArray[np.uint8]]:
    """The label's box on a width x height frame and its pixels (opaque: it replaces what is under it).
    Rendered once per text and frame size; each frame then costs one copy of a small patch."""
    scale, thickness, _, text_height, baseline = _font_metrics(text, height)
    x1, y1, x2, y2 = label_box(text, width, height)
    patch = np.empty((max(0, y2 - y1), max(0, x2 - x1), 3), np.uint8)
    patch[:] = BOX_COLOUR
    if x2 - x1 < 2 or y2 - y1 < 2:
        return (x1, y1, x1, y1), patch[:0, :0]  # nothing fits
    cv2.rectangle(patch, (0, 0), (x2 - x1 - 1, y2 - y1 - 1), TEXT_COLOUR, 1)
    padding = max(3, text_height // 3)
    origin = (padding, y2 - y1 - padding - baseline)
    cv2.putText(patch, text, origin, FONT, scale, TEXT_COLOUR, thickness, cv2.LINE_AA)
    patch.flags.writeable = False  # shared by every frame of this size
    return (x1, y1, x2, y2), patch


@functools.lru_cache(maxsize=16)
def _label_on_device(text: str, width: int, height: int) -> Any:
    return require_cupy().asarray(rendered_label(text, width, height)[1])  # uploaded once, not per frame


def draw_label(frame_rgb: Frame, text: str) -> Box:
    """Draw `text` bottom-right on an RGB uint8 frame (NumPy or CuPy), in place; returns its box."""
    height, width = frame_rgb.shape[:2]
    (x1, y1, x2, y2), patch = rendered_label(text, width, height)
    if x2 > x1 and y2 > y1:
        frame_rgb[y1:y2, x1:x2] = (
            _label_on_device(text, width, height) if is_device_array(frame_rgb) else patch
        )
    return x1, y1, x2, y2


@dataclass(frozen=True)
class AuditRecord:
    """One audit event: who (token id and/or remote address), when (UTC), what source, which engine."""

    action: AuditAction
    session_id: str
    token_id: str | None
    remote: str | None
    source_sha256: str | None
    engine: str | None
    time_utc: str


def audit_record(
    action: AuditAction,
    session_id: str,
    *,
    token_id: str | None,
    remote: str | None,
    source_sha256: str | None = None,
    engine: str | None = None,
    now: datetime.datetime | None = None,
) -> AuditRecord:
    moment = now or datetime.datetime.now(datetime.UTC)
    return AuditRecord(
        action=action,
        session_id=session_id,
        token_id=token_id,
        remote=remote,
        source_sha256=source_sha256,
        engine=engine,
        time_utc=moment.isoformat(timespec="milliseconds"),
    )


def log_audit(record: AuditRecord) -> None:
    """The structured audit line (event="audit"); every field becomes a key of the JSON log entry."""
    logger.info(
        "audit: %s session %s by %s from %s (source %s, engine %s)",
        record.action,
        record.session_id,
        record.token_id or "no token",
        record.remote or "unknown address",
        record.source_sha256 or "none",
        record.engine or "none",
        extra={"event": "audit", **asdict(record)},
    )
