"""What stands in front of a target face (a microphone, a phone, a cup, a hand, hair): the target keeps it.

Per face and frame, on a small copy of the face box (`WORK_HEIGHT` px from forehead to chin, so the cost
does not grow with the face), pixels inside the mesh's face oval are judged against the target's own
skin (gpu_ops.skin_model, fitted on its central cheeks and forehead, like the source's):
- colour unlike the face's skin (a grey microphone, a blue phone, a white cup);
- dark, far darker than both the face's median and the skin around it (a black microphone or phone),
  each where the light fitted on the face's mesh expects it brighter (face_light.py: the shadowed half
  of a side-lit face is skin, not an occluder);
  below the nose dark is a beard, a moustache or the shade of a smile, so there it counts only where the
  mirror side of the face (the mesh's own left-right map) is not dark as well: a beard is symmetric, a
  hand or a microphone is not;
- a near-neutral colour (grey, white, black: a pale face's skin lies only a few of its own spreads
  from neutral, so the skin score alone lets a white cup pass as a highlight);
- the eyes, brows, nose and the inner mouth are features, never occluders (their own masks handle
  them); on the lips only a near-neutral colour counts (lips are a redder skin, a microphone is grey),
  so the source's lips are not drawn across a microphone. An occluder found outside a feature takes it
  along where it runs across it or ends on it, and a thin one (a glasses rim) is followed along itself
  over the brows but takes no eye opening (the eye inside a lens: occlusion_regions.py).
Crisp evidence without specks (connected regions of at least `occlusion_regions.MIN_OCCLUDER` of the face height squared)
is grown past its anti-aliased rim and softened.

With a face track (the stream's memory) the target's skin model is the track's: fitted on its first
frame and refitted slowly (every `REFIT_FRAMES`, averaged) from frames with nothing in front of the face,
never from a covered one, so a hand raised in front of a cheek cannot teach the model that it is skin.
The decision is steady from frame to frame: the previous frame's mask (moved with the face box) lowers
the threshold where it was set (hysteresis, no flicker at the edge), while new evidence takes effect in
the same frame (a moving hand's mask follows it at once); a released pixel fades over a few frames.
A face covered over more than `FADE_COVER[0]` of its oval fades the whole swap out towards the target
(fully at `FADE_COVER[1]`), smoothed over the track, so eyes and lips are never drawn on the occluder.
The evidence is judged on the host from the small copy (gpu_ops.occlusion_mask.cell_average: a device
frame averages the box there and sends only that copy over the bus);
the mask returns to the frame's device through gpu_ops.occlusion_mask.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.masks import Mask, feather_outside_cpu, fill_polygons_cpu, smoothstep
from gpu_ops.occlusion_mask import cell_average
from gpu_ops.skin_model import (
    SkinColourModel,
    SkinThresholds,
    fit_skin_model_cpu,
    score_skin_cpu,
)
from models import face_mesh_topology as topology
from streamer.pipeline.swap_engines.face_light import expected_luma, fit_light, vertex_normals
from streamer.pipeline.swap_engines.mesh_skin import (
    CHEEK_SAMPLE,
    FOREHEAD_SAMPLE,
    disc,
    feature_region,
    sample_region,
)
from streamer.pipeline.swap_engines.mesh_source import MeshSourceConfig, depth, lowered_outline
from streamer.pipeline.swap_engines.occlusion_regions import bridged, followed, joined, mirror_rows, regions

logger = logging.getLogger(__name__)

Points = NDArray[np.float32]

WORK_HEIGHT = 60.0  # px from forehead top to chin at which the evidence is judged (area-averaged)
# all lengths below are fractions of the face height
ILLUMINATION = 0.1  # the scale of the light on the face (score_skin's surroundings)
NEUTRAL_FROM = 0.12  # a neutral colour counts fully from this far inside the oval
OUTLINE_ZONE = 0.06  # evidence counts fully from this far inside the oval
FEATURE_MARGIN = 0.03  # eyes, brows and nose are protected this far around
SOFTNESS = 0.0125  # the mask edge is softened by a blur of this sigma (a crisp edge shows as a contour)
EDGE_GROWTH = 0.025  # occluders grow by this much: their anti-aliased rim goes with them
BEARD_FROM = 0.02  # above the nose's base: where a moustache may start
RISE, HOLD = 0.5, 0.3  # evidence sets a pixel above RISE, keeps a pixel set last frame above HOLD
RELEASE = 0.5  # a pixel no longer occluded keeps this share of its last mask per frame
LIPS_NEUTRAL = (
    0.5,
    0.8,
)  # how far towards grey a pixel lies (0 skin, 1 grey): an occluder from..to (all that counts on the lips)
FADE_COVER = (0.4, 0.65)  # share of the oval covered: the swap starts fading, is gone
FADE_WEIGHT = 0.35  # of the new frame in the track's fade (a fade takes a few frames)
REFIT_FRAMES = 30  # a track's skin model is refitted this often (a fit costs ~2 ms)...
REFIT_WEIGHT = 0.3  # ...with this weight of the new fit...
REFIT_MAX_COVER = 0.02  # ...from frames covered less than this
LIGHT_FRAMES = 6  # a track's light is refitted this often (the light changes slowly)...
NO_EXPECTATION = 1e6  # ...and where no vertex is near, its expected luma is this (beyond any pixel's)
OCCLUDED_FRAME = 0.03  # a face covered over this share of its oval counts as occluded (/metrics)


@dataclass(frozen=True)
class OcclusionThresholds:
    """The target's skin is judged more loosely than the source's: a miss keeps a little of the target's
    skin unswapped, a false alarm would leave a hole in every frame of a call."""

    skin: SkinThresholds = field(
        default_factory=lambda: SkinThresholds(
            chroma_distance=5.0, chroma_falloff=3.0, specular_allowance=0.4, blur_px=0.0
        )
    )


@dataclass
class OcclusionTrack:
    """One face track's occlusion state."""

    model: SkinColourModel | None = None
    frames_since_refit: int = 0
    mask: Mask | None = None  # last frame's working-size mask...
    origin: tuple[float, float] = (0.0, 0.0)  # ...its box origin in frame px...
    scale: float = 1.0  # ...and working px per frame px
    fade: float = 1.0  # share of the swap shown
    light: Mask | None = None  # the skin luma the last light fit expects (face_light.py)...
    light_height: float = 1.0  # ...for a face this tall (working px)...
    light_corner: tuple[float, float] = (0.0, 0.0)  # ...whose mesh's top-left corner was here...
    light_age: int = 0  # ...fitted this many frames ago


@dataclass(frozen=True)
class Occlusion:
    """One face's occlusion in one frame: the mask at working size, how much of the oval it covers and
    how much of the swap shows (the fade)."""

    mask: Mask  # [ceil(H/f), ceil(W/f)] float32 0..1, cells of f x f box px, 1 = occluder (the target shows)
    factor: int  # f: frame px per working px
    cover: float
    fade: float

    @property
    def occluded(self) -> bool:
        return self.cover > OCCLUDED_FRAME


def working_factor(mesh: Points) -> int:
    """Frame px per working px, a whole number (OpenCV's area resize has a fast path for those): the
    face's height becomes about WORK_HEIGHT (never enlarged)."""
    height = float(np.linalg.norm(mesh[topology.CHIN_BOTTOM, :2] - mesh[topology.FOREHEAD_TOP, :2]))
    return max(1, round(height / WORK_HEIGHT))


def _average_models(old: SkinColourModel, new: SkinColourModel, weight: float) -> SkinColourModel:
    return SkinColourModel(
        chroma_mean=(old.chroma_mean + weight * (new.chroma_mean - old.chroma_mean)).astype(np.float32),
        chroma_covariance=(
            old.chroma_covariance + weight * (new.chroma_covariance - old.chroma_covariance)
        ).astype(np.float32),
        luma_median=old.luma_median + weight * (new.luma_median - old.luma_median),
        inlier_fraction=new.inlier_fraction,
    )


def _previous_mask(
    track: OcclusionTrack, origin: tuple[float, float], scale: float, size: tuple[int, int]
) -> Mask:
    """The track's last mask moved to this frame's working box (zeros without one)."""
    if track.mask is None:
        return np.zeros((size[1], size[0]), np.float32)
    ratio = scale / track.scale
    # working px now = ((working px then) / scale_then + origin_then - origin_now) * scale_now
    matrix = np.array(
        [
            [ratio, 0.0, (track.origin[0] - origin[0]) * scale],
            [0.0, ratio, (track.origin[1] - origin[1]) * scale],
        ],
        np.float32,
    )
    moved = cv2.warpAffine(track.mask, matrix, size, flags=cv2.INTER_LINEAR, borderValue=0.0)
    return np.asarray(moved, np.float32)


def face_occlusion(
    region: object,
    mesh: Points,
    origin: tuple[float, float] = (0.0, 0.0),
    frame_scale: float = 1.0,
    track: OcclusionTrack | None = None,
    thresholds: OcclusionThresholds | None = None,
    hands: Sequence[Points] = (),
) -> Occlusion:
    """The occlusion of one face: `region` is its face box (H x W x 3 uint8 RGB, host or device), `mesh`
    its 468 points in region px; `origin` is the box's top-left corner in frame px and `frame_scale` the
    region's px per frame px (a box swapped at a working resolution), so a track's mask follows the face
    in the frame; with `track` the decision is the track's (skin model, hysteresis, fade: see module
    docstring). `hands`: outlines (region px) of hands in front of the face (mesh_hands.py): occluders
    whatever their colour, over the features too."""
    thresholds = thresholds or OcclusionThresholds()
    factor = working_factor(mesh)
    scale = frame_scale / factor  # working px per frame px
    small = cell_average(region, factor)  # a device region is averaged there: only this copy crosses
    size = (small.shape[1], small.shape[0])
    # a cell's centre is the centre of its factor x factor region pixels
    points = ((mesh[:, :2] + 0.5) / factor - 0.5).astype(np.float32)
    face_height = float(np.linalg.norm(points[topology.CHIN_BOTTOM] - points[topology.FOREHEAD_TOP]))
    # the pasted outline: above the brows it is lowered below the hairline (mesh_source.py)
    oval = fill_polygons_cpu(size, [lowered_outline(points, MeshSourceConfig().forehead_drop)]) > 0
    lips = fill_polygons_cpu(size, [points[list(topology.LIPS_OUTER)]]) > 0
    eyes = [points[list(topology.RIGHT_EYE)], points[list(topology.LEFT_EYE)]]
    eyes_and_brows = feature_region(points, size, eyes, with_nose=False)
    features = np.maximum(eyes_and_brows, fill_polygons_cpu(size, [_hull(points, topology.NOSE)]))
    model = track.model if track is not None and track.model is not None else None
    if model is None:
        try:
            model = _fit(small, points, features, face_height, thresholds)
        except ValueError as error:  # a sample too dark or too small: nothing is judged this frame
            logger.debug("no target skin model: %s", error)
            return Occlusion(
                mask=np.zeros((size[1], size[0]), np.float32), factor=factor, cover=0.0, fade=1.0
            )
    previous = _previous_mask(track, origin, scale, size) if track is not None else None
    # the light the face's shape expects: its shadowed side is darker skin, not an occluder (face_light.py);
    # fitted on skin away from the features, and not on what was in front of the face last frame
    skin = oval & (features == 0) & ~lips
    if previous is not None:
        skin &= previous < 0.5
    expected = _expected_light(track, small, mesh, points, skin, face_height, model.luma_median)
    scores = score_skin_cpu(
        small, model, thresholds.skin, illumination_px=ILLUMINATION * face_height, expected_luma=expected
    )
    dark = 1.0 - scores.luma
    # below the nose only asymmetric dark counts (a beard has its mirror image, a microphone has not)
    rows = np.arange(size[1], dtype=np.float32)[:, None]
    beard_start = float(points[topology.NOSE_BASE_MIDDLE, 1]) - BEARD_FROM * face_height
    beard_zone = smoothstep((rows - beard_start) / (0.03 * face_height)) * np.ones((1, size[0]), np.float32)
    # (only the rows from the beard zone's start, with the reach of the erode and dilate above it)
    top = int(np.clip(np.floor(beard_start - 0.1 * face_height), 0, size[1] - 1))
    map_x, map_y = mirror_rows(points - np.array([0.0, top], np.float32), oval[top:])
    mirrored = cv2.remap(dark[top:], map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    mirrored = cv2.erode(mirrored, disc(0.02 * face_height))  # a beard's edge is not exact
    asymmetric = np.zeros_like(dark)
    asymmetric[top:] = np.clip(dark[top:] - cv2.dilate(mirrored, disc(0.06 * face_height)), 0.0, 1.0)
    dark_evidence = dark * (1.0 - beard_zone) + asymmetric * beard_zone
    protected = feather_outside_cpu(
        ((features > 0) & ~lips).astype(np.uint8),
        FEATURE_MARGIN * face_height,
        0.015 * face_height,
        precise=False,
    )
    # grey, white or black: a pale face's skin lies only a few of its own spreads from neutral, so the
    # chroma score alone lets a white cup pass as a highlight
    neutral = smoothstep((scores.towards_neutral - LIPS_NEUTRAL[0]) / (LIPS_NEUTRAL[1] - LIPS_NEUTRAL[0]))
    # (not near the outline: a grey or white background, a collar, are past the face there)
    inside_by = depth(oval, precise=False)
    deep = smoothstep(inside_by / np.float32(NEUTRAL_FROM * face_height))
    evidence = np.maximum(np.maximum(1.0 - scores.chroma, dark_evidence), neutral * deep)
    on_lips = lips.astype(np.float32)
    evidence = evidence * (1.0 - on_lips) + np.minimum(evidence, neutral) * on_lips
    # the inner mouth is the target's own (teeth are white, the mouth mask keeps it)
    inner_mouth = fill_polygons_cpu(size, [points[list(topology.LIPS_INNER)]]) > 0
    # along the outline the background and the collar past a jaw are the rim guard's (gpu_ops.rim_guard):
    # counted from OUTLINE_ZONE inside, an occluder crossing the outline is found by its inner part
    interior = smoothstep(inside_by / np.float32(OUTLINE_ZONE * face_height))
    rim_evidence = (evidence * (1.0 - interior) * oval * ~inner_mouth).astype(np.float32)
    evidence = (evidence * interior * ~inner_mouth).astype(np.float32)
    threshold = np.full(evidence.shape, RISE, np.float32)
    if previous is not None:
        threshold = np.where(previous > 0.5, np.float32(HOLD), threshold).astype(np.float32)
    crisp = regions(evidence * (1.0 - protected), threshold, face_height)
    # a feature is covered where an occluder found outside it runs on into it (a bar across an eye, a
    # phone over the nose); dark brows or nostrils on their own are never occluders
    # (the nose has no dark of its own but its nostrils, so there all that joins the occluder counts)
    gaze = feather_outside_cpu(
        eyes_and_brows, FEATURE_MARGIN * face_height, 0.015 * face_height, precise=False
    )
    candidates = (evidence * protected) > threshold
    outside = joined(crisp, candidates & (gaze <= 0.5))
    in_gaze = candidates & (gaze > 0.5)
    # a thin occluder is followed on over the brows from where it is found or joined outside them (a
    # glasses rim leaving the cheek, the temple or the nose's bridge), not into the lids' opening: there
    # the lash line runs on from the eye's corners, where a rim may touch it
    lids = cv2.dilate(fill_polygons_cpu(size, eyes), disc(FEATURE_MARGIN * face_height)) > 0
    crossing = np.maximum(
        np.maximum(bridged(crisp, in_gaze, face_height, lids), outside),
        followed(np.maximum(crisp, outside), in_gaze & ~lids, face_height),
    )
    # an occluder crossing the outline takes its part in the outline zone along (a microphone below the
    # chin); what lies only in that zone (the background past a jaw) is the rim guard's, not an occluder
    crossing = np.maximum(crossing, joined(crisp, (rim_evidence * (1.0 - protected)) > threshold))
    if hands:
        hand = (fill_polygons_cpu(size, [(h + 0.5) / factor - 0.5 for h in hands]) > 0) & oval
        crossing = np.maximum(crossing, (hand & (protected > 0)).astype(np.float32))
        crisp = np.maximum(crisp, hand.astype(np.float32))
    crisp = np.maximum(crisp, crossing)
    grown = cv2.dilate(crisp, disc(2.0 * EDGE_GROWTH * face_height))
    mask = np.minimum(cv2.GaussianBlur(grown, (0, 0), SOFTNESS * face_height) * 2.0, 1.0)
    # the grown rim may reach over the nose but not over the eyes and brows, unless the occluder does
    if crossing.any():
        gaze = gaze * (1.0 - cv2.dilate(crossing, disc(2.0 * EDGE_GROWTH * face_height)))
    mask = (mask * (1.0 - gaze)).astype(np.float32)
    if previous is not None:
        mask = np.maximum(mask, RELEASE * previous * (1.0 - gaze)).astype(np.float32)
    area = max(float(oval.sum()), 1.0)
    cover = float((mask * oval).sum() / area)
    ramp = np.array((cover - FADE_COVER[0]) / (FADE_COVER[1] - FADE_COVER[0]), np.float32)
    fade = 1.0 - float(smoothstep(ramp))
    if track is not None:
        fade = track.fade + FADE_WEIGHT * (fade - track.fade) if track.mask is not None else fade
        _remember(track, small, points, features, face_height, thresholds, model, cover)
        track.mask, track.origin, track.scale, track.fade = mask, origin, scale, fade
    return Occlusion(mask=mask, factor=factor, cover=cover, fade=fade)


def _expected_light(
    track: OcclusionTrack | None,
    small: NDArray[np.uint8],
    mesh: Points,
    points: Points,
    skin: NDArray[np.bool_],
    face_height: float,
    luma_median: float,
) -> Mask | None:
    """The skin luma the light on the face leads one to expect (face_light.py). A track fits it every
    `LIGHT_FRAMES` frames and keeps the last fit's field in between, moved and scaled with the face in
    the working copy (the light is the room's and smooth: a fit and its spread cost ~0.3 ms, this ~0.02).
    `skin`: the working copy's pixels whose vertices may be fitted."""
    size = (small.shape[1], small.shape[0])
    if track is not None and track.light is not None and track.light_age < LIGHT_FRAMES:
        track.light_age += 1
        # the light falls on the face: the field goes where the face went in the working copy (its
        # top-left corner and its size)
        ratio = face_height / track.light_height
        (then_x, then_y), (now_x, now_y) = track.light_corner, points.min(axis=0)  # the mesh's top left
        matrix = np.array(
            [[ratio, 0, now_x - then_x * ratio], [0, ratio, now_y - then_y * ratio]], np.float32
        )
        kept = cv2.warpAffine(track.light, matrix, size, borderValue=NO_EXPECTATION)
        return np.asarray(kept, np.float32)
    columns = np.clip(np.rint(points[:, 0]).astype(np.intp), 0, size[0] - 1)
    rows = np.clip(np.rint(points[:, 1]).astype(np.intp), 0, size[1] - 1)
    normals = vertex_normals(mesh)
    light = fit_light(small, points, normals, skin[rows, columns], face_height)
    if light is None:
        return None
    field = np.minimum(
        expected_luma(light, points, normals, size, face_height, luma_median), np.float32(NO_EXPECTATION)
    )
    if track is not None:
        track.light, track.light_age, track.light_height = field, 1, face_height
        track.light_corner = (float(points[:, 0].min()), float(points[:, 1].min()))
    return field


def _hull(points: Points, outline: tuple[int, ...]) -> Points:
    return np.asarray(cv2.convexHull(points[list(outline)]), np.float32).reshape(-1, 2)


def _fit(
    small: NDArray[np.uint8],
    points: Points,
    features: NDArray[np.uint8],
    face_height: float,
    thresholds: OcclusionThresholds,
) -> SkinColourModel:
    cheeks = sample_region(points, features, face_height, CHEEK_SAMPLE)
    sample = cheeks | sample_region(points, features, face_height, FOREHEAD_SAMPLE)
    return fit_skin_model_cpu(small, sample, thresholds.skin, start=cheeks)


def _remember(
    track: OcclusionTrack,
    small: NDArray[np.uint8],
    points: Points,
    features: NDArray[np.uint8],
    face_height: float,
    thresholds: OcclusionThresholds,
    model: SkinColourModel,
    cover: float,
) -> None:
    """Keep the track's skin model; refit it slowly, and only from a frame with nothing in front."""
    if track.model is None:
        track.model = model
        return
    track.frames_since_refit += 1
    if track.frames_since_refit < REFIT_FRAMES or cover > REFIT_MAX_COVER:
        return
    track.frames_since_refit = 0
    try:
        fresh = _fit(small, points, features, face_height, thresholds)
    except ValueError:  # a sample too dark to fit: keep the old model
        return
    track.model = _average_models(track.model, fresh, REFIT_WEIGHT)
