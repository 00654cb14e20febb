"""The light on a target face, from its mesh: a side-lit face's shadowed half is not an occluder.

The occlusion mask counts a pixel as dark (a black microphone, a phone) when it is far darker than the
skin around it (gpu_ops.skin_model.score_skin_cpu). A window or a lamp beside the face defeats that: a
whole cheek in shadow is dark against the lit skin its surroundings reach, and its deepest part is dark
against the rest. Yet the light on a face follows the face's shape, which the mesh gives: the skin's
brightness is a sum of the nine spherical harmonics up to order 2 of the surface normal (ambient light
and distant lights from any side, a Lambertian face's self-shadowed side included) and a gradient across
the face. That is fitted at the mesh's own vertices, robustly (a vertex far off the fit, an occluder's
or a beard's, is left out of the next round), on skin away from the eyes, brows, nose and lips, and
spread over the face; a pixel then counts as dark only where it is also far below this expected
brightness (both of score_skin's comparisons use it where it is the lower). What the fit cannot explain
stays dark: an occluder's flat black does not follow the normals (a microphone or a phone held in the
shadow is still found: tests/integration/test_mesh_target_occlusion.py), and the expectation never
falls below `FLOOR` of the skin's median luma.

Measured at 480 px (a lamp's light falling to 30 % across the face, both sides, 8 photos; and two
photos lit so): the share of the oval taken for an occluder went from 0.06 to 0.02 on average, on the
side-lit photo fr_alex_lacamoire.png from 0.30 to 0.03 (docs/mesh_engine.md).
"""

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.skin_model import LUMA_WEIGHTS
from models import face_mesh_topology as topology

Points = NDArray[np.float32]

FLOOR = 0.2  # of the skin's median luma: the expected brightness is never below this
ROUNDS = 2  # fits: all usable vertices, then those near the first fit
RIDGE = 1e-3  # on the normal equations' diagonal (vertex count times squared unit terms)
OUTLIER = 2.5  # spreads off the fit: left out of the next round
MIN_VERTICES = 40  # fewer usable vertices: no expectation (the surroundings alone judge)
SPREAD = 0.05  # of the face height: the vertices' expectations are spread this far (Gaussian sigma)
_FIRST, _SECOND, _THIRD = (np.ascontiguousarray(topology.TRIANGLES[:, corner]) for corner in range(3))
_CORNERS = np.concatenate([_FIRST, _SECOND, _THIRD])  # each triangle's corners, first ones first


def vertex_normals(mesh: NDArray[np.float32]) -> NDArray[np.float32]:
    """Unit normals [468, 3] of the mesh's vertices (area-weighted over their triangles); the sign is
    the triangles' winding, the same for every vertex, which is all the fit needs."""
    # coordinates as rows and np.take (NumPy's fancy indexing of mesh[TRIANGLES] and np.cross are
    # several times slower at this size)
    rows = np.ascontiguousarray(mesh[:, :3].T, np.float32)
    first = rows.take(_FIRST, axis=1)
    (ax, ay, az), (bx, by, bz) = rows.take(_SECOND, axis=1) - first, rows.take(_THIRD, axis=1) - first
    faces = np.stack([ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx])
    # each triangle's normal added to its three corners
    on_corners = np.tile(faces, 3)
    x, y, z = (np.bincount(_CORNERS, on_corners[axis], len(mesh)) for axis in range(3))
    length = np.maximum(np.sqrt(x * x + y * y + z * z), 1e-6)
    return np.stack([x / length, y / length, z / length], axis=1).astype(np.float32)


def light_terms(normals: NDArray[np.float32], offsets: NDArray[np.float32]) -> NDArray[np.float64]:
    """[N, 11] terms the light is a linear sum of: the nine spherical harmonics up to order 2 of the
    normals (what Lambertian light from any direction amounts to, its self-shadowed side included)
    and the vertex's offset from the face's centre (light falling off across the face)."""
    terms = np.empty((len(normals), 11), np.float64)
    x, y, z = terms[:, 1], terms[:, 2], terms[:, 3]
    terms[:, 0] = 1.0
    terms[:, 1:4] = normals
    terms[:, 4], terms[:, 5], terms[:, 6] = x * y, x * z, y * z
    terms[:, 7], terms[:, 8] = x * x - y * y, 3.0 * z * z - 1.0
    terms[:, 9:] = offsets
    return terms


def _design(points: Points, normals: NDArray[np.float32], face_height: float) -> NDArray[np.float64]:
    return light_terms(normals, (points - points.mean(axis=0)) / np.float32(max(face_height, 1.0)))


def fit_light(
    image: NDArray[np.uint8],
    points: Points,
    normals: NDArray[np.float32],
    usable: NDArray[np.bool_],
    face_height: float,
) -> NDArray[np.float64] | None:
    """The light on the face in `image` (H x W x 3 uint8 RGB, the face's small copy; `points` its
    vertices in those px): the coefficients of `light_terms`, fitted on the `usable` vertices (skin)
    inside the image; None when too few are left."""
    height, width = image.shape[:2]
    usable = usable & (points >= 0).all(axis=1) & (points[:, 0] <= width - 1) & (points[:, 1] <= height - 1)
    luma = np.asarray(image, np.float32) @ LUMA_WEIGHTS
    map_x = np.ascontiguousarray(points[None, :, 0], np.float32)
    map_y = np.ascontiguousarray(points[None, :, 1], np.float32)
    sampled = cv2.remap(luma, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)[0]
    design = _design(points, normals, face_height)
    chosen = usable
    coefficients = None
    for _ in range(ROUNDS):
        if int(chosen.sum()) < MIN_VERTICES:
            return None
        terms = design[chosen]
        # the normal equations (a little ridge: a face seen from the side leaves some terms flat)
        coefficients = np.linalg.solve(
            terms.T @ terms + RIDGE * np.eye(len(terms.T)), terms.T @ sampled[chosen]
        )
        residual = sampled - design @ coefficients
        spread = 1.25 * float(np.abs(residual[chosen]).mean()) + 1.0  # a normal sigma (median: 4x slower)
        chosen = usable & (np.abs(residual) < OUTLIER * spread)
    return coefficients


def expected_luma(
    light: NDArray[np.float64],
    points: Points,
    normals: NDArray[np.float32],
    size: tuple[int, int],
    face_height: float,
    luma_median: float,
) -> NDArray[np.float32]:
    """The skin luma `light` (fit_light's) expects at each pixel of a (w, h) face copy whose vertices are
    `points`, never under FLOOR x `luma_median`; +inf where no vertex is near (past the outline)."""
    width, height = size
    predicted = np.maximum(_design(points, normals, face_height) @ light, FLOOR * luma_median)
    # spread the vertices' expectations over the pixels (a normalised convolution)
    columns = np.clip(np.rint(points[:, 0]).astype(np.intp), 0, width - 1)
    rows = np.clip(np.rint(points[:, 1]).astype(np.intp), 0, height - 1)
    cells = rows * width + columns
    weighted = np.bincount(cells, predicted, height * width).reshape(height, width).astype(np.float32)
    weights = np.bincount(cells, None, height * width).reshape(height, width).astype(np.float32)
    sigma = max(SPREAD * face_height, 1.0)
    weighted = np.asarray(cv2.GaussianBlur(weighted, (0, 0), sigma), np.float32)
    weights = np.asarray(cv2.GaussianBlur(weights, (0, 0), sigma), np.float32)
    covered = weights > 0.05 / (2.0 * np.pi * sigma * sigma)
    expected = np.full((height, width), np.inf, np.float32)
    expected[covered] = weighted[covered] / weights[covered]
    return expected
