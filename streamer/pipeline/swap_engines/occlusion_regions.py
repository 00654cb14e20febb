"""Region steps of the target occlusion mask (mesh_occlusion.py), at its working size: the face's mirror
image row by row, crisp regions without specks, and how an occluder found outside a feature takes the
feature along where it runs across it, onto it or along it. Host arrays (NumPy, OpenCV)."""

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.masks import Mask
from streamer.pipeline.swap_engines.mesh_skin import disc

Points = NDArray[np.float32]

MIN_OCCLUDER = 0.07  # an occluder covers at least this squared (a strand of hair, not a pore or a crease)
REACH = 0.1  # an occluder ending on a feature covers it this far...
BRIDGE = 0.25  # ...and its parts on both sides of a feature this wide join across it
# a thin occluder (a glasses rim) is followed this far along itself into a feature: from where it leaves
# the cheek, the temple or the nose to the top of its arc over an eye (a quarter of a rim about an eye
# wide: a lens is ~0.25 of the face height wide, ~0.2 high)
FOLLOW = 0.2
THIN = 0.1  # ...from where it is thinner than this (a rim, a temple arm; a broad one has REACH and BRIDGE)


# the face's midline, forehead to chin (the mesh's own vertices on the symmetry plane)
MIDLINE = (
    10,
    151,
    9,
    8,
    168,
    6,
    197,
    195,
    5,
    4,
    1,
    19,
    94,
    2,
    164,
    0,
    11,
    12,
    13,
    14,
    15,
    16,
    17,
    18,
    200,
    199,
    175,
    152,
)

_MIDLINE = np.array(MIDLINE)


def mirror_rows(points: Points, oval: NDArray[np.bool_]) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """A remap taking each pixel to its mirror image across the face's midline, row by row: the
    midline's x at that row, each side scaled to the other's width there (a turned face's far side is
    narrower). Cheaper than the mesh's triangle-wise mirror and as good for dark regions of some size."""
    height, width = oval.shape
    rows = np.arange(height, dtype=np.float32)
    line = points[_MIDLINE]
    order = np.argsort(line[:, 1])
    middle = np.interp(rows, line[order, 1], line[order, 0]).astype(np.float32)
    any_inside = oval.any(axis=1)
    left = np.where(any_inside, oval.argmax(axis=1), 0).astype(np.float32)
    right = np.where(any_inside, width - 1 - oval[:, ::-1].argmax(axis=1), width - 1).astype(np.float32)
    left_half = np.maximum(middle - left, 1.0)[:, None]
    right_half = np.maximum(right - middle, 1.0)[:, None]
    columns = np.arange(width, dtype=np.float32)[None, :]
    offset = columns - middle[:, None]
    map_x = np.where(
        offset < 0,
        middle[:, None] - offset * (right_half / left_half),
        middle[:, None] - offset * (left_half / right_half),
    )
    map_y = np.repeat(rows, width).reshape(height, width)
    return np.ascontiguousarray(map_x, np.float32), map_y


def regions(score: NDArray[np.float32], threshold: NDArray[np.float32], face_height: float) -> Mask:
    """Connected regions of `score` above `threshold` of at least MIN_OCCLUDER squared, as 0/1 float32."""
    crisp = (score > threshold).astype(np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(crisp, connectivity=8)
    if count <= 1:
        return np.zeros(score.shape, np.float32)
    large = stats[:, cv2.CC_STAT_AREA] >= (MIN_OCCLUDER * face_height) ** 2
    large[0] = False
    return large[labels].astype(np.float32)


def bridged(
    found: Mask, candidates: NDArray[np.bool_], face_height: float, openings: NDArray[np.bool_]
) -> Mask:
    """The `candidates` pixels (occluder-like inside a feature) in the gaps of `found` that a closing of
    BRIDGE of the face height fills, or within REACH of it: where an occluder runs across a feature or
    ends on it, not along it (a bar across an eye covers the brow above it, not the whole brow). From a
    thin part of `found` (`thin`: a glasses rim around an eye) not into the `openings` (the eyes'): the
    closing would fill the lens, and the dark eye inside it is not the rim's."""
    if not candidates.any() or not found.any():
        return np.zeros(found.shape, np.float32)

    def gaps(part: Mask) -> NDArray[np.bool_]:
        closed = cv2.morphologyEx(part, cv2.MORPH_CLOSE, disc(BRIDGE * face_height))
        near = cv2.dilate(part, disc(2.0 * REACH * face_height))
        return np.asarray((closed > 0.5) | (near > 0.5), np.bool_)

    narrow = thin(found, face_height)
    if not narrow.any():  # all broad: its gaps reach everywhere
        reached = gaps(found)
    else:
        reached = gaps(found) & ~openings
        broad = np.where(narrow, np.float32(0.0), found).astype(np.float32)
        if broad.any():
            reached |= gaps(broad)
    return (reached & candidates & (found <= 0)).astype(np.float32)


def thin(found: Mask, face_height: float) -> NDArray[np.bool_]:
    """Where `found` is thin: no point within THIN of the face height of it lies further than THIN / 2
    inside it (a rim, a temple arm; a broad occluder's corner is not thin, nor its edge where a
    feature's protection cuts it)."""
    inside = (found > 0).astype(np.uint8)
    half_width = cv2.dilate(cv2.distanceTransform(inside, cv2.DIST_L2, 3), disc(2.0 * THIN * face_height))
    return (inside > 0) & (half_width <= 0.5 * THIN * face_height)


def joined(found: Mask, candidates: NDArray[np.bool_]) -> Mask:
    """The `candidates` pixels connected (through candidates and found) to a `found` region, as 0/1."""
    if not candidates.any() or not found.any():
        return np.zeros(found.shape, np.float32)
    union = ((found > 0) | candidates).astype(np.uint8)
    _, labels = cv2.connectedComponents(union, connectivity=8)
    reached = np.zeros(int(labels.max()) + 1, bool)
    reached[labels[found > 0]] = True
    reached[0] = False
    return (reached[labels] & candidates & (found <= 0)).astype(np.float32)


def followed(found: Mask, candidates: NDArray[np.bool_], face_height: float) -> Mask:
    """The `candidates` pixels that a thin part of `found` (`thin`) runs on into, as 0/1: reached by a
    path through candidates at most FOLLOW of the face height long, whichever way it curves (a closing,
    or a reach in a straight line, misses a rim's arc over an eye)."""
    if not candidates.any() or not found.any():
        return np.zeros(found.shape, np.float32)
    inside = (found > 0).astype(np.uint8)
    reached = thin(found, face_height).astype(np.uint8)
    allowed = candidates.astype(np.uint8) | reached
    step = np.ones((3, 3), np.uint8)
    for _ in range(max(1, round(FOLLOW * face_height))):
        grown = np.asarray(cv2.dilate(reached, step), np.uint8) & allowed
        if np.array_equal(grown, reached):
            break
        reached = grown
    return ((reached > 0) & candidates & (inside == 0)).astype(np.float32)
