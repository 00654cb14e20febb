"""Which pixels of a source face's texture are its skin, and what takes the place of the rest: once per source.

Anything in front of the source's face (hair, glasses, a hand, a microphone) or a deep shadow on it
would otherwise be warped onto every target frame: a strand of red hair lying across someone else's
cheek. So, in the texture crop, before any warp:
1. The face's own skin colour is fitted on its central cheeks and forehead (gpu_ops.skin_model) and
   every pixel is scored for colour and for brightness.
2. Not skin: a colour unlike the skin (fine detail kept: a thin strand counts), or a dark region
   wider than `DARK_REGION` of the face height (creases, pores and nostrils are narrower and stay).
   Below the nose, dark is a beard, a moustache, stubble or the shadows of a smile: part of the
   identity, kept where the mirror side of the face is dark as well (a beard is symmetric); dark with
   no mirror-side counterpart (a hand, a microphone on one cheek) or, inside the face, far darker than
   it (a patch over stubble) or with far more dark around it than around its counterpart (a patch
   joining a moustache's end, where both sides are lit alike) is an occluder there too, and so is a
   colour unlike skin. The eyes, brows, lips and nose are features with masks of their own, never
   occluders; dark beside them is their own shade, unless below the nose it is part of a one-sided
   dark region found away from them (a patch that reaches the mouth corner goes whole, up to the lips).
3. Each occluded pixel is filled from the mirrored point of the face (the mesh's own left-right map)
   when that one is skin and both sides are lit alike there, its tone matched to this side's
   surrounding skin (under a strong side light the bright side's highlights, scaled down, would make
   a patchwork of the shaded side). The rest gets no alpha, so the target's own pixels show there,
   under the same shading transfer as the rest of the face (the relit source around them has the
   target's tone).
The face-mesh model gives no per-point visibility; a turned source's hidden side is handled by the
triangle culling of mesh_source.py.
"""

import logging
from dataclasses import dataclass
from typing import Any, Literal

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.masks import (
    BinaryMask,
    Mask,
    feather_inside_cpu,
    feather_outside_cpu,
    fill_polygons_cpu,
    smoothstep,
)
from gpu_ops.mesh_warp import RemapField, build_remap_cpu
from gpu_ops.skin_model import SkinColourModel, SkinThresholds, fit_skin_model_cpu, score_skin_cpu
from models import face_mesh_topology as topology

logger = logging.getLogger(__name__)

Points = NDArray[np.float32]
OccluderFill = Literal["mirror", "target"]  # mirror side first, else the target; or the target only

# all lengths are fractions of the face height (forehead top to chin) in the texture
CHEEK_SAMPLE = ((50, 0.09), (280, 0.09))  # (vertex, radius) of the sample's centres: the cheeks...
FOREHEAD_SAMPLE = ((151, 0.09),)  # ...and the forehead, which joins where it agrees (a fringe may lie on it)
SAMPLE_FEATURE_MARGIN = 0.03  # the sample keeps this far from eyes, brows, lips, nose
FEATURE_MARGIN, FEATURE_FEATHER = 0.02, 0.015  # features are never occluders, nor this close to them
SOCKET_MARGIN = 0.04  # dark this close to a feature is its own shade (eye sockets, the corners of a smile)
MIN_OCCLUDER = 0.03  # an occluder covers at least this squared (a thin strand does; specks of noise not)
ILLUMINATION = 0.08  # the scale of the light on the face: darker than the skin around at this scale
DARK_REGION = 0.03  # dark regions narrower than this are skin texture (creases, pores, nostrils)
OCCLUDED = 0.25  # an occluder score above this counts
EDGE_GROWTH = 0.02  # occluders grow by this much: their anti-aliased rim goes with them
FACIAL_HAIR_FROM, FACIAL_HAIR_RAMP = 0.02, 0.03  # above the nose's base: where a moustache may start
BEARD_REACH = 0.06  # a beard's counterpart is looked for this far around the mirrored point
BARE_SKIN = (0.6, 0.9)  # skin score (colour x brightness) of bare skin: from .. to
DARKER_THAN_MIRROR = (0.15, 0.3)  # darker than the darkest counterpart by (darkness score): from .. to
DARKER_RULE_DEPTH = 0.15  # ...inside the face: fully this deep in (a jaw's rim is not lit alike)
# far more dark around a pixel than around its mirrored point (shares of the area at this scale): a
# patch that joins a moustache's end, whose counterpart is the other end alone; judged only where both
# sides are lit alike (a side light darkens one half of a moustache)
MORE_DARK_SCALE, MORE_DARK_THAN_MIRROR = 0.04, (0.25, 0.45)
FEATURE_CORE = 0.006  # a dark occluder reaching a feature's margin is taken along to within this of it
FILL_TONE_SIGMA = 0.12  # the scale at which a mirrored fill takes this side's tone
FILL_GAIN_LIMITS = (0.5, 2.0)
SIDES_ALIKE = (float(np.log(1.25)), float(np.log(1.5)))  # |log tone gain| between the sides: alike .. not
PASTE_SOFTNESS = 0.012  # blur of the paste mask's holes
LOW_FREQUENCY_PX = 6.0  # a tone's blur runs at the scale where its sigma is about this many pixels


@dataclass(frozen=True)
class SkinFill:
    """The texture with occluders replaced, and where the source is pasted at all."""

    texture: NDArray[np.uint8]  # [S,S,3]: occluded skin replaced from the mirror side
    paste: Mask  # [S,S] 1 where the source (own or mirrored) shows; 0 where the target's pixels show
    model: SkinColourModel
    occluded_share: float  # of the face region, not the source's own skin
    mirrored_share: float  # of the face region, filled from the mirror side


def odd_px(length: float) -> int:
    """An odd kernel size of about `length` px, at least 3."""
    return max(3, round(length) | 1)


def disc(length: float) -> NDArray[np.uint8]:
    size = odd_px(length)
    return np.asarray(cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (size, size)), np.uint8)


def sample_region(
    mesh: Points, features: BinaryMask, face_height: float, centres: tuple[tuple[int, float], ...]
) -> NDArray[np.bool_]:
    """The triangles around the given mesh vertices (the central cheeks, the forehead), away from the
    features: where skin is surest."""
    size = (features.shape[1], features.shape[0])
    centroids = mesh[topology.TRIANGLES, :2].mean(axis=1)
    chosen = np.zeros(len(centroids), bool)
    for vertex, radius in centres:
        chosen |= np.linalg.norm(centroids - mesh[vertex, :2], axis=1) < radius * face_height
    region = fill_polygons_cpu(size, [mesh[triangle, :2] for triangle in topology.TRIANGLES[chosen]]) > 0
    margin = SAMPLE_FEATURE_MARGIN * face_height
    return region & (feather_outside_cpu(features, margin, 1.0) < 0.01)


def mirror_field(mesh: Points, size: tuple[int, int]) -> RemapField:
    """A remap field taking every texture pixel of the face to its mirror image across the midline."""
    triangles = topology.TRIANGLES
    return build_remap_cpu(
        mesh[triangles, :2].astype(np.float32), mesh[topology.MIRROR[triangles], :2].astype(np.float32), size
    )


def _low_frequency(image: NDArray[np.float32], weights: Mask, sigma: float) -> NDArray[np.float32]:
    """Weight-normalised blur: the local tone of the weighted pixels, spread into the gaps between them.
    Blurred at a scale where the blur is a few pixels wide (a 30 px Gaussian at full size took 35 ms)."""
    size = (image.shape[1], image.shape[0])
    factor = max(1, int(sigma // LOW_FREQUENCY_PX))
    small = (max(1, size[0] // factor), max(1, size[1] // factor))
    weighted = cv2.resize(image * weights[..., None], small, interpolation=cv2.INTER_AREA)
    total = cv2.resize(weights, small, interpolation=cv2.INTER_AREA)
    weighted = cv2.GaussianBlur(weighted, (0, 0), sigma * small[0] / size[0])
    total = cv2.GaussianBlur(total, (0, 0), sigma * small[0] / size[0])
    tone = weighted / np.maximum(total, 1e-3)[..., None]
    return np.asarray(cv2.resize(tone, size, interpolation=cv2.INTER_LINEAR), np.float32)


def _tone_gain(
    pixels: NDArray[np.float32],
    weights: Mask,
    mirror_pixels: NDArray[np.float32],
    mirror_weights: Mask,
    face_height: float,
) -> NDArray[np.float32]:
    """This side's local skin tone over the mirror side's, per channel (what a mirrored fill is scaled by)."""
    sigma = FILL_TONE_SIGMA * face_height
    gain = (_low_frequency(pixels, weights, sigma) + 6.0) / (
        _low_frequency(mirror_pixels, mirror_weights, sigma) + 6.0
    )
    return np.asarray(np.clip(gain, *FILL_GAIN_LIMITS), np.float32)


def _lit_alike(gain: NDArray[np.float32]) -> Mask:
    """1 where the two sides' tones are near (lit alike), 0 where a side light makes one far darker."""
    unevenness = np.abs(np.log(gain).mean(axis=2))
    return np.asarray(
        1.0 - smoothstep((unevenness - SIDES_ALIKE[0]) / (SIDES_ALIKE[1] - SIDES_ALIKE[0])), np.float32
    )


def _large_regions(crisp: NDArray[np.bool_], face_height: float) -> NDArray[np.bool_]:
    """The 8-connected regions of `crisp` covering at least `MIN_OCCLUDER` squared (no specks)."""
    _, labels, stats, _ = cv2.connectedComponentsWithStats(crisp.astype(np.uint8), connectivity=8)
    large = stats[:, cv2.CC_STAT_AREA] >= (MIN_OCCLUDER * face_height) ** 2
    large[0] = False  # the background label
    return np.asarray(large[labels], np.bool_)


def _grown(score: NDArray[Any], face_height: float) -> Mask:
    """A crisp occluder decision without specks (JPEG noise, a pore), grown past its soft rim and softened
    only on the skin side of it."""
    large = _large_regions(score > OCCLUDED, face_height)
    grown = cv2.dilate(large.astype(np.float32), disc(2.0 * EDGE_GROWTH * face_height))
    softened = cv2.GaussianBlur(grown, (0, 0), 0.5 * EDGE_GROWTH * face_height)
    return np.asarray(np.minimum(softened * 2.0, 1.0), np.float32)


def _seeded(score: NDArray[np.float32], exempt: Mask, face_height: float) -> NDArray[np.float32]:
    """`score` where the exempt zone does not hold it, and inside the zone too where its region there is
    joined to an occluder found outside (at least `MIN_OCCLUDER` squared)."""
    seeds = _large_regions(score * (1.0 - exempt) > OCCLUDED, face_height)
    count, labels = cv2.connectedComponents((score > OCCLUDED).astype(np.uint8), connectivity=8)
    joined = np.zeros(count, bool)
    joined[labels[seeds]] = True
    joined[0] = False
    return np.asarray(np.where(joined[labels], score, score * (1.0 - exempt)), np.float32)


def fill_occluders(
    texture: NDArray[np.uint8],
    mesh: Points,
    features: BinaryMask,
    face_region: BinaryMask,
    face_height: float,
    thresholds: SkinThresholds,
    fill: OccluderFill = "mirror",
    *,
    beard_symmetry: bool = True,
) -> SkinFill:
    """Find what is not skin in the face texture and fill it (see module docstring)."""
    size = (texture.shape[1], texture.shape[0])
    cheeks = sample_region(mesh, features, face_height, CHEEK_SAMPLE)
    sample = cheeks | sample_region(mesh, features, face_height, FOREHEAD_SAMPLE)
    model = fit_skin_model_cpu(texture, sample, thresholds, start=cheeks)
    scores = score_skin_cpu(texture, model, thresholds, illumination_px=ILLUMINATION * face_height)
    rows = np.arange(size[1], dtype=np.float32)[:, None]
    start = float(mesh[topology.NOSE_BASE_MIDDLE, 1]) - FACIAL_HAIR_FROM * face_height
    facial_hair = smoothstep((rows - start) / (FACIAL_HAIR_RAMP * face_height))
    dark = (scores.chroma * (1.0 - scores.luma)).astype(np.float32)  # skin-coloured but far darker
    inside = (face_region > 0).astype(np.float32)
    map_x, map_y = mirror_field(mesh, size)

    def mirrored(image: NDArray[np.float32], outside: float = 0.0) -> NDArray[np.float32]:
        remapped = cv2.remap(
            image, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=outside
        )
        return np.asarray(remapped, np.float32)

    # below the nose dark is a beard, for a beard is symmetric and a hand or a microphone on one cheek
    # is not: dark is an occluder where the mirror side is bare, lit skin all around the mirrored point
    # (a beard's two sides differ in shade and outline, hence the reach), and inside the face also where
    # it is far darker than the darkest of the mirror side around it (a patch over stubble) or where far
    # more of its surroundings are dark than of the mirrored point's (a patch joining a moustache's end,
    # on a face lit alike both sides). A mirrored point off the face counts as a counterpart (a turned
    # face's far jaw).
    reach = disc(BEARD_REACH * face_height)
    bare = (scores.chroma * scores.luma).astype(np.float32)
    mirror_bare = smoothstep(
        (cv2.erode(mirrored(bare), reach) - BARE_SKIN[0]) / (BARE_SKIN[1] - BARE_SKIN[0])
    )
    counterpart = cv2.dilate(np.maximum(mirrored(dark), 1.0 - mirrored(inside, 1.0)), reach)
    lo, hi = DARKER_THAN_MIRROR
    far_darker = smoothstep(np.asarray((dark - counterpart - lo) / (hi - lo), np.float32))
    scale = MORE_DARK_SCALE * face_height
    dark_around = cv2.GaussianBlur(dark, (0, 0), scale)
    mirror_dark_around = cv2.GaussianBlur(
        np.maximum(mirrored(dark), 1.0 - mirrored(inside, 1.0)), (0, 0), scale
    )
    lo, hi = MORE_DARK_THAN_MIRROR
    more_dark = smoothstep(np.asarray((dark_around - mirror_dark_around - lo) / (hi - lo), np.float32))
    pixels = texture.astype(np.float32)
    mirror_pixels = mirrored(pixels)
    skin_weights = bare * inside
    lit_alike = _lit_alike(
        _tone_gain(pixels, skin_weights, mirror_pixels, mirrored(skin_weights), face_height)
    )
    darker = np.maximum(far_darker, more_dark * lit_alike) * feather_inside_cpu(
        face_region, DARKER_RULE_DEPTH * face_height
    )
    one_sided = dark * np.maximum(mirror_bare, darker) * facial_hair * np.float32(beard_symmetry)
    dark = dark * (1.0 - facial_hair)
    protected = feather_outside_cpu(features, FEATURE_MARGIN * face_height, FEATURE_FEATHER * face_height)
    sockets = feather_outside_cpu(features, SOCKET_MARGIN * face_height, FEATURE_FEATHER * face_height)
    core = feather_outside_cpu(features, 0.0, FEATURE_CORE * face_height)
    unlike_skin = _grown((1.0 - scores.chroma) * (1.0 - protected), face_height)
    dark_regions = cv2.morphologyEx(dark, cv2.MORPH_OPEN, disc(DARK_REGION * face_height))
    one_sided = np.asarray(
        cv2.morphologyEx(one_sided, cv2.MORPH_OPEN, disc(DARK_REGION * face_height)), np.float32
    )
    # dark beside the features is their own shade (eye sockets; a smile's folds differ from side to
    # side in a side light), unless below the nose it belongs to a one-sided dark region found away
    # from them: a patch reaching the mouth corner is taken whole, up to the lips themselves
    darkness = _grown(dark_regions * (1.0 - sockets), face_height)
    one_sided = _grown(_seeded(one_sided, sockets, face_height), face_height)
    occluded = np.maximum(np.maximum(unlike_skin, darkness) * (1.0 - protected), one_sided * (1.0 - core))
    keep = (1.0 - occluded).astype(np.float32)
    from_mirror = np.zeros_like(keep)
    if fill == "mirror":
        mirror_keep = mirrored(keep)
        gain = _tone_gain(pixels, keep * inside, mirror_pixels, mirror_keep * inside, face_height)
        # only where both sides are lit alike: under a side light the bright side's highlights and
        # shading, scaled down, make a patchwork of the shaded side (and the identity suffers)
        from_mirror = occluded * mirror_keep * _lit_alike(gain)
        pixels = pixels * keep[..., None] + mirror_pixels * gain * from_mirror[..., None]
        total = keep + from_mirror
        pixels = np.where(total[..., None] > 1e-3, pixels / np.maximum(total, 1e-3)[..., None], texture)
    paste = cv2.GaussianBlur(np.clip(keep + from_mirror, 0.0, 1.0), (0, 0), PASTE_SOFTNESS * face_height)
    area = max(float(inside.sum()), 1.0)
    return SkinFill(
        texture=np.clip(pixels + 0.5, 0, 255).astype(np.uint8),
        paste=np.asarray(paste, np.float32),
        model=model,
        occluded_share=float((occluded * inside).sum() / area),
        mirrored_share=float((from_mirror * inside).sum() / area),
    )


def feature_region(
    mesh: Points, size: tuple[int, int], extra: list[Points], *, with_nose: bool = True
) -> BinaryMask:
    """Eyebrows and the nose (convex hulls) with the caller's feature outlines (eyes, lips, mouth)."""
    parts = (topology.RIGHT_EYEBROW, topology.LEFT_EYEBROW) + ((topology.NOSE,) if with_nose else ())
    hulls: list[Points] = [
        np.asarray(cv2.convexHull(mesh[list(points), :2].astype(np.float32)), np.float32).reshape(-1, 2)
        for points in parts
    ]
    return fill_polygons_cpu(size, hulls + extra)
