"""Where a face is swapped, at what size, and the remap field that warps the source onto it.

All of it follows from the frame's size, the face's mesh and the source, none from the frame's pixels
or the stream's memory, so the pipeline works it out in its track half (`MeshEngine.plan`), on the
worker thread, while the swap stage is still busy with the previous frame; the swap half then only
samples, masks and blends. The field (a triangle-id raster and six coefficients per pixel) is about
1.4 ms of a 640x480 face's swap on the CPU. Its pixels outside the mesh point at the source's blank
texel (mesh_source.BLANK_TEXEL), not off the texture: OpenCV then samples the whole box on its fast path.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from gpu_ops.mesh_warp import build_remap
from gpu_ops.working_resolution import scale_mesh, whole_factor, working_size
from models import face_mesh_topology as topology
from streamer.pipeline.swap_engines.mesh_source import BLANK_TEXEL

PasteBox = tuple[int, int, int, int]  # x1, y1, x2, y2 (exclusive), frame px
# (x, y) where the field's uncovered pixels sample the source
_UNCOVERED_POINT = (float(BLANK_TEXEL[1]), float(BLANK_TEXEL[0]))


@dataclass(frozen=True)
class FaceGeometry:
    """One face's swap geometry. `mesh` is the frame-px mesh it was made for; `working` the (w, h) the
    region is swapped at (None: full size); `region_mesh` the mesh in the px of what is swapped;
    `field` the remap field over it (on the device for a device frame; None for a box under 2 px)."""

    mesh: NDArray[np.float32]
    box: PasteBox
    working: tuple[int, int] | None
    region_mesh: NDArray[np.float32]
    field: Any = None


def paste_box(mesh: NDArray[np.float32], frame_width: int, frame_height: int) -> PasteBox:
    """The integer box (x2, y2 exclusive) holding every mesh point plus a 1-px rim, inside the frame."""
    low = np.floor(mesh[:, :2].min(axis=0)) - 1
    high = np.ceil(mesh[:, :2].max(axis=0)) + 2
    x1, y1 = int(max(0, low[0])), int(max(0, low[1]))
    x2, y2 = int(min(frame_width, high[0])), int(min(frame_height, high[1]))
    return x1, y1, max(x1, x2), max(y1, y2)


def working_box(
    mesh: NDArray[np.float32], frame_size: tuple[int, int], working_px: int | None, *, on_device: bool = False
) -> tuple[PasteBox, tuple[int, int] | None]:
    """The paste box and the (w, h) its region is swapped at (None: as it is). A box a whole factor k
    above the cap is grown to a multiple of k and swapped at 1/k, where the shrink is a plain block mean
    (gpu_ops.working_resolution.whole_factor); else at the fractional working size."""
    box = paste_box(mesh, *frame_size)
    size = (box[2] - box[0], box[3] - box[1])
    if on_device or min(size) < 2:
        return box, None
    factor = whole_factor(size, working_px)
    if factor is not None and (widened := widened_to_multiple(box, factor, *frame_size)) is not None:
        return widened, ((widened[2] - widened[0]) // factor, (widened[3] - widened[1]) // factor)
    return box, working_size(size, working_px)


def widened_to_multiple(box: PasteBox, factor: int, frame_width: int, frame_height: int) -> PasteBox | None:
    """`box` grown by under `factor` px a side so its width and height are multiples of `factor`
    (towards the far edge, or the near one at the frame's edge); None when the frame has no room."""
    x1, y1, x2, y2 = box
    x1, x2 = _widened(x1, x2, factor, frame_width)
    y1, y2 = _widened(y1, y2, factor, frame_height)
    if (x2 - x1) % factor or (y2 - y1) % factor:
        return None
    return x1, y1, x2, y2


def _widened(low: int, high: int, factor: int, limit: int) -> tuple[int, int]:
    grow = -(high - low) % factor
    far = min(grow, limit - high)
    return max(0, low - (grow - far)), high + far


def face_geometry(
    mesh: NDArray[np.float32],
    frame_size: tuple[int, int],
    src_triangles: NDArray[np.float32],
    working_px: int | None,
    *,
    on_device: bool = False,
) -> FaceGeometry:
    """The geometry of the face with `mesh` in a (w, h) frame, the field warping the source's
    triangles onto it included. `on_device`: the field in CuPy, and never at a working size (the device
    path has the headroom, docs/gpu.md)."""
    box, working = working_box(mesh, frame_size, working_px, on_device=on_device)
    x1, y1, x2, y2 = box
    local = np.array(mesh, np.float32, copy=True)
    local[:, :2] -= np.array([x1, y1], np.float32)
    size = (x2 - x1, y2 - y1)
    region_mesh = local if working is None else scale_mesh(local, size, working)
    field = None
    if min(size) >= 2:
        dst_triangles = region_mesh[topology.ALL_TRIANGLES, :2]
        field = build_remap(
            dst_triangles, src_triangles, working or size, on_device=on_device, outside=_UNCOVERED_POINT
        )
    return FaceGeometry(mesh, box, working, region_mesh, field)
