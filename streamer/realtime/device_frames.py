"""The only two bus crossings of a frame on the GPU path: one upload of the decoded I420 planes, one
download of the finished I420 frame (DESIGN.md section 2).

Upload: the decoder's planes (padded rows, pitch > width) are copied as they are, padding included, into
ONE pinned staging buffer per session, and that buffer goes to the device in ONE async copy; the device
planes are pitched views into it (the colour kernels take pitches, nothing is repacked). Download: the
three device planes are packed device-side into one buffer and copied in ONE async copy into a ring of
pinned buffers, because the encoder may still hold the previous frame while the next one lands.

The logic is written against an array module (`xp`) and a small `Transfers` interface, so the NumPy
mirror (`HostTransfers`: "device" = host memory) runs it on CPU with the same call pattern, and the
`BusLedger` counts copies and bytes so tests can assert "a frame crosses the bus exactly twice".
"""

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal, NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

from gpu_ops.errors import InvalidFrameError

logger = logging.getLogger(__name__)

Direction = Literal["up", "down"]
DEFAULT_RING_SIZE = 3  # encoder holds one, one is being filled, one spare


class I420Planes(NamedTuple):
    """Y [h,w], U and V [h/2,w/2] uint8 planes; rows may be padded (pitch = strides[0])."""

    y: Any
    u: Any
    v: Any


class Transfers(Protocol):
    """Where buffers live and how bytes move between host and device (async where the device allows)."""

    xp: ModuleType

    def pinned_host(self, nbytes: int) -> NDArray[np.uint8]: ...

    def device_buffer(self, nbytes: int) -> Any: ...

    def host_to_device(self, host: NDArray[np.uint8], device: Any) -> None: ...

    def device_to_host(self, device: Any, host: NDArray[np.uint8]) -> None: ...

    def synchronize(self) -> None: ...

    def record_event(self) -> "CopyEvent": ...


class CopyEvent(Protocol):
    """Marks a point on the stream; `synchronize()` waits on the host until the stream passed it."""

    def synchronize(self) -> None: ...


class _DoneEvent:
    """Host copies are complete when they return."""

    def synchronize(self) -> None:
        return None


@dataclass
class BusLedger:
    """Copies and bytes that crossed the bus, per direction (thread-safe counters)."""

    uploads: int = 0
    upload_bytes: int = 0
    downloads: int = 0
    download_bytes: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Direction, int], None]] = []

    def add_listener(self, listener: Callable[[Direction, int], None]) -> None:
        """Also hand every copy to `listener(direction, nbytes)` (the daemon's /metrics counters)."""
        self._listeners.append(listener)

    def record_upload(self, nbytes: int) -> None:
        with self._lock:
            self.uploads += 1
            self.upload_bytes += nbytes
        for listener in self._listeners:
            listener("up", nbytes)

    def record_download(self, nbytes: int) -> None:
        with self._lock:
            self.downloads += 1
            self.download_bytes += nbytes
        for listener in self._listeners:
            listener("down", nbytes)

    @property
    def crossings(self) -> int:
        return self.uploads + self.downloads


class HostTransfers:
    """NumPy mirror: "device" buffers are host arrays and copies are memcpy; same calls, same counts."""

    xp: ModuleType = np

    def pinned_host(self, nbytes: int) -> NDArray[np.uint8]:
        return np.empty(nbytes, dtype=np.uint8)

    def device_buffer(self, nbytes: int) -> NDArray[np.uint8]:
        return np.empty(nbytes, dtype=np.uint8)

    def host_to_device(self, host: NDArray[np.uint8], device: Any) -> None:
        np.copyto(device, host)

    def device_to_host(self, device: Any, host: NDArray[np.uint8]) -> None:
        np.copyto(host, device)

    def synchronize(self) -> None:
        return None

    def record_event(self) -> CopyEvent:
        return _DoneEvent()


class CupyTransfers:
    """Page-locked host buffers and async copies on the engine's CUDA stream (CuPy imported lazily)."""

    def __init__(self, stream: Any) -> None:
        from gpu_ops.backend import require_cupy

        self.xp = require_cupy()
        self.stream = stream

    def pinned_host(self, nbytes: int) -> NDArray[np.uint8]:
        memory = self.xp.cuda.alloc_pinned_memory(nbytes)
        return np.frombuffer(memory, dtype=np.uint8, count=nbytes)

    def device_buffer(self, nbytes: int) -> Any:
        return self.xp.empty(nbytes, dtype=self.xp.uint8)

    def host_to_device(self, host: NDArray[np.uint8], device: Any) -> None:
        device.set(host, stream=self.stream)

    def device_to_host(self, device: Any, host: NDArray[np.uint8]) -> None:
        device.get(stream=self.stream, out=host, blocking=False)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def record_event(self) -> CopyEvent:
        event = self.xp.cuda.Event(block=False, disable_timing=True)
        event.record(self.stream)
        return event  # type: ignore[no-any-return]


@dataclass(frozen=True)
class PlaneLayout:
    """Where each plane sits in a packed buffer: byte offset, rows, row pitch, visible width."""

    offsets: tuple[int, int, int]
    rows: tuple[int, int, int]
    pitches: tuple[int, int, int]
    widths: tuple[int, int, int]

    @property
    def nbytes(self) -> int:
        return self.offsets[2] + self.rows[2] * self.pitches[2]

    @classmethod
    def of(cls, planes: I420Planes) -> "PlaneLayout":
        rows, pitches, widths, offsets = [], [], [], []
        offset = 0
        for plane in planes:
            if plane.ndim != 2 or plane.dtype != np.uint8 or plane.strides[1] != 1:
                raise InvalidFrameError(
                    f"I420 planes must be 2-D uint8 with unit column stride, got {plane.shape}"
                )
            offsets.append(offset)
            rows.append(plane.shape[0])
            pitches.append(int(plane.strides[0]))
            widths.append(plane.shape[1])
            offset += plane.shape[0] * int(plane.strides[0])
        height, width = planes.y.shape
        if (
            height % 2
            or width % 2
            or planes.u.shape != (height // 2, width // 2)
            or planes.u.shape != planes.v.shape
        ):
            raise InvalidFrameError(
                f"planes do not form an even-sized I420 frame: {[plane.shape for plane in planes]}"
            )
        return cls(tuple(offsets), tuple(rows), tuple(pitches), tuple(widths))  # type: ignore[arg-type]

    @classmethod
    def packed(cls, width: int, height: int) -> "PlaneLayout":
        """Rows without padding, planes back to back (the download layout)."""
        luma, chroma = width * height, (width // 2) * (height // 2)
        return cls(
            (0, luma, luma + chroma),
            (height, height // 2, height // 2),
            (width, width // 2, width // 2),
            (width, width // 2, width // 2),
        )

    def views(self, buffer: Any) -> I420Planes:
        """Pitched 2-D views of the three planes inside a packed 1-D buffer (host or device)."""
        return I420Planes(
            *(
                buffer[offset : offset + rows * pitch].reshape(rows, pitch)[:, :width]
                for offset, rows, pitch, width in zip(self.offsets, self.rows, self.pitches, self.widths)
            )
        )


def planes_of_video_frame(video_frame: Any) -> I420Planes:
    """Zero-copy pitched views of a yuv420p `av.VideoFrame`'s planes (line_size kept as pitch)."""
    if video_frame.format.name != "yuv420p":
        raise InvalidFrameError(f"expected a yuv420p frame, got {video_frame.format.name}")
    views = []
    for plane in video_frame.planes:
        raw = np.frombuffer(plane, dtype=np.uint8)
        views.append(
            raw[: plane.height * plane.line_size].reshape(plane.height, plane.line_size)[:, : plane.width]
        )
    return I420Planes(*views)


class DeviceFrames:
    """One session's transfer state: a pinned staging buffer for uploads and a pinned ring for downloads.

    Buffers are sized on first use and reallocated when the frame layout changes (resolution, pitch).
    Not thread-safe: the GPU worker thread is its only user.
    """

    def __init__(
        self, transfers: Transfers, *, ring_size: int = DEFAULT_RING_SIZE, ledger: BusLedger | None = None
    ):
        if ring_size < 2:
            raise InvalidFrameError(
                "the download ring needs >= 2 slots: the encoder may hold the previous frame"
            )
        self.transfers = transfers
        self.ledger = ledger or BusLedger()
        self.ring_size = ring_size
        self._upload_layout: PlaneLayout | None = None
        self._staging: NDArray[np.uint8] | None = None
        self._staging_sent: CopyEvent | None = None  # the last upload out of the staging buffer
        self._device_input: Any = None
        self._download_layout: PlaneLayout | None = None
        self._device_output: Any = None
        self._ring: list[NDArray[np.uint8]] = []
        self._next_slot = 0
        self.uploaded: I420Planes | None = None  # the device planes of the last upload, until the next

    def upload(self, planes: I420Planes) -> I420Planes:
        """Host planes -> device planes (pitched views) with one host->device copy, queued async."""
        self.uploaded = None
        layout = PlaneLayout.of(planes)
        if layout != self._upload_layout:
            self._staging = self.transfers.pinned_host(layout.nbytes)
            self._device_input = self.transfers.device_buffer(layout.nbytes)
            self._upload_layout = layout
            logger.debug("upload buffers sized to %d bytes (pitches %s)", layout.nbytes, layout.pitches)
            self._staging_sent = None
        assert self._staging is not None
        if self._staging_sent is not None:
            self._staging_sent.synchronize()  # the async copy of the previous frame must have read it
        for staged, plane in zip(layout.views(self._staging), planes):
            staged[...] = plane  # host memcpy into pinned memory: rows keep their pitch
        self.transfers.host_to_device(self._staging, self._device_input)
        self._staging_sent = self.transfers.record_event()
        self.ledger.record_upload(layout.nbytes)
        self.uploaded = layout.views(self._device_input)
        return self.uploaded

    def download(self, planes: I420Planes) -> I420Planes:
        """Device planes -> host planes in the next ring slot, with one device->host copy.

        The copy is queued on the stream; call `finish()` before the encoder reads the returned views.
        A slot is reused `ring_size` downloads later.
        """
        height, width = planes.y.shape
        return PlaneLayout.packed(width, height).views(self.download_packed(planes))

    def download_packed(self, planes: I420Planes) -> NDArray[np.uint8]:
        """`download`, returning the ring slot itself: Y, U, V back to back without padding, which is
        the layout `av.VideoFrame.from_ndarray(slot.reshape(h * 3 // 2, w), format="yuv420p")` takes."""
        height, width = planes.y.shape
        layout = PlaneLayout.packed(width, height)
        if layout != self._download_layout:
            self._device_output = self.transfers.device_buffer(layout.nbytes)
            self._ring = [self.transfers.pinned_host(layout.nbytes) for _ in range(self.ring_size)]
            self._next_slot = 0
            self._download_layout = layout
        for packed, plane in zip(layout.views(self._device_output), planes):
            packed[...] = plane  # device-side pack: stays on the device
        slot = self._ring[self._next_slot]
        self._next_slot = (self._next_slot + 1) % self.ring_size
        self.transfers.device_to_host(self._device_output, slot)
        self.ledger.record_download(layout.nbytes)
        return slot

    def finish(self) -> None:
        """Wait until queued copies (and the kernels before them) are done."""
        self.transfers.synchronize()
