"""The mesh engine's source identity: a face texture crop, its mesh and its masks, computed once per source.

Everything derivable from the source photo is done here so a frame costs one warp and one blend:
- the texture is an eye-levelled crop of fixed size (faces of any photo size look alike to the warp);
- masks live in that crop and travel with the texture through the warp (alpha channel): the face
  outline with its top lowered below the hairline and feathered wider there, (optionally) the
  target's eyes and inner mouth cut out so its gaze and speech show;
- what is not the face's skin (hair, glasses, a hand, a microphone, deep shadow) is filled from the
  mirror side or left to the target (mesh_skin.py), in the texture itself;
- the multi-band blend's per-level masks (`band_masks`): each coarser band fades in further inside the
  paste mask, so the tone at the face's edge and around its holes stays the target's;
- the zone along the outline where the target's own dark rim is kept (`rim_zone`, gpu_ops.rim_guard);
- triangles the source shows edge-on or from behind (a turned head's far cheek) take their texture
  from the mirrored triangle of the near side instead of smearing a few pixels over a large area.
A source turned further than `max_source_yaw_degrees` is refused: mirroring cannot invent half a face.
"""

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import require_cupy
from gpu_ops.masks import Mask, feather_inside_cpu, feather_outside_cpu, fill_polygons_cpu, smoothstep
from gpu_ops.skin_model import SkinThresholds
from models import face_mesh_topology as topology
from models.face import Frame
from streamer.pipeline.swap_engines.base import NoFaceError
from streamer.pipeline.swap_engines.mesh_skin import OccluderFill, SkinFill, feature_region, fill_occluders

logger = logging.getLogger(__name__)

Points = NDArray[np.float32]
TextureName = Literal[
    "texture", "texture_features_cut", "lips_mask", "band_masks", "band_masks_features_cut", "rim_zone"
]
# the texel (row, column) that is 0 in every texture: far outside the face, so nothing samples it but
# the pixels of the swap's remap field that no triangle covers (mesh_geometry.py), which point here
# rather than off the texture: the same zeros through cv2.remap's fast path
BLANK_TEXEL = (0, 0)
# the inner-mouth cut reaches this far past its outline in the texture, so the bilinear sample of a
# target pixel inside the target's inner mouth never picks up alpha from outside the cut
MIN_CUT_MARGIN_PX = 2.5  # 1 px of bilinear reach + 1 px of outline rasterisation, with room


@dataclass(frozen=True)
class MeshSourceConfig:
    """How a source photo becomes a texture; fractions are of the face height (forehead top to chin)."""

    texture_size: int = 384
    face_height_in_texture: float = 0.6  # of texture_size
    cull_back_faces: bool = True
    facing_threshold: float = 0.0  # a triangle seen at a cos below this (from behind) is culled...
    mirror_advantage: float = 0.3  # ...when its mirror image faces the camera this much better
    skin_mask: bool = True  # what is not the face's skin is filled or left to the target (mesh_skin.py)
    skin: SkinThresholds = field(default_factory=SkinThresholds)
    occluder_fill: OccluderFill = "mirror"
    beard_symmetry: bool = True  # below the nose, dark without a mirror-side counterpart is an occluder
    # the multi-band blend's coarser levels (1, 2, 3) fade in from the face's outline over these widths:
    # at the cheeks and jaw the finer bands narrow (their stubble, beard and creases are identity: a
    # wider level 1 cost the identity check 3 pairs) and the coarsest, the tone, wide (0.06 -> 0.12
    # flattened the edge, mean seam ratio 1.06 -> 0.96, identity unchanged; 0.18 cost 2 pairs); wider
    # still at the forehead, where the edge crosses bare skin and shows most...
    band_widths: tuple[float, ...] = (0.03, 0.06, 0.12)
    forehead_band_widths: tuple[float, ...] = (0.05, 0.10, 0.15)
    # ...and from the eye and mouth holes: 0 keeps their transition to the eye and mouth cuts' own
    # feathers (a 1 % ramp here moved the identity check from 75 to 73 of 78 pairs)
    hole_band_widths: tuple[float, ...] = (0.0, 0.0, 0.0)
    rim_zone_width: float = 0.08  # the target's dark rim is kept up to this far inside the outline
    forehead_drop: float = 0.25  # of the distance brow line -> top of the outline
    edge_feather: float = 0.025
    forehead_feather: float = 0.14
    # target eyes kept: the eye opening fades to the target's over this width inwards from the lid line,
    # so the gaze (iris, white) is the target's and the lids and lashes stay the source's
    eye_feather: float = 0.015
    max_source_yaw_degrees: float = 30.0  # beyond, the nose hides its far side: no fill looks right
    # below this turn the far cheek is only foreshortened; mirroring there would paste the near side's
    # sideburn and outline into the cheek (seen on a 14-degree source), so it is left alone
    min_yaw_for_mirror_degrees: float = 18.0


@dataclass(frozen=True)
class MeshSource:
    """A prepared source face. Textures are RGBA crops whose alpha is the paste mask."""

    texture: NDArray[np.uint8]  # [S,S,4], alpha = the whole face (source eyes and mouth shown)
    texture_features_cut: NDArray[np.uint8]  # [S,S,4], alpha cuts the eyes and inner mouth out
    lips_mask: NDArray[np.uint8]  # [S,S] 0..255, the lips and their rim
    band_masks: NDArray[np.uint8]  # [S,S,B] 0..255, the multi-band blend's coarser levels for `texture`
    band_masks_features_cut: NDArray[np.uint8]  # the same for `texture_features_cut`
    rim_zone: NDArray[np.uint8]  # [S,S] 255 on the outline falling to 0 at rim_zone_width inside
    mesh: Points  # [468,3] in texture px
    src_triangles: Points  # [T,3,2] texture px per ALL_TRIANGLES row (mirrored where culled)
    mouth_openness: float  # inner-lip gap / mouth width
    yaw_degrees: float
    mirrored_triangles: int
    occluded_share: float = 0.0  # of the face: not the source's own skin (filled or left to the target)
    engine: Literal["mesh"] = "mesh"
    _device_copies: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def pixels_on_device(self, name: TextureName) -> Any:
        """A texture or mask as a CuPy array, uploaded once per source: a source photo is prepared once
        and then swapped onto every frame of the stream, so it lives on the device, not on the bus."""
        copy = self._device_copies.get(name)
        if copy is None:
            copy = require_cupy().asarray(getattr(self, name))
            self._device_copies[name] = copy
        return copy


def mouth_openness(mesh: Points) -> float:
    """Inner-lip gap over mouth width: ~0 closed, ~0.3 talking, > 0.5 wide open."""
    gap = float(np.linalg.norm(mesh[topology.UPPER_INNER_LIP, :2] - mesh[topology.LOWER_INNER_LIP, :2]))
    width = float(np.linalg.norm(mesh[78, :2] - mesh[308, :2]))
    return float(gap / max(width, 1e-3))


def yaw_degrees(mesh: Points) -> float:
    """Head turn from the 3-D line between the cheek outline points 234 and 454 (0 frontal)."""
    delta = mesh[454] - mesh[234]
    eye_axis = mesh[263, :2] - mesh[33, :2]
    across = float(delta[:2] @ eye_axis / max(float(np.linalg.norm(eye_axis)), 1e-3))
    return float(np.degrees(np.arctan2(float(delta[2]), across)))


def facing(mesh: Points, triangles: NDArray[np.int32]) -> NDArray[np.float32]:
    """cos of the angle between each triangle's normal and the view axis; < 0 means seen from behind."""
    a, b, c = (mesh[triangles[:, k]].astype(np.float32) for k in range(3))
    normal_length = np.linalg.norm(np.cross(b - a, c - a), axis=1)
    return (topology.signed_areas(mesh, triangles) / np.maximum(normal_length, 1e-6)).astype(np.float32)


def cull_to_mirror(mesh: Points, threshold: float, advantage: float) -> tuple[Points, int]:
    """[T,3,2] source triangles for ALL_TRIANGLES, edge-on ones replaced by their mirror image."""
    triangles = topology.ALL_TRIANGLES
    src_triangles = mesh[triangles, :2].astype(np.float32)
    own = facing(mesh, topology.TRIANGLES)
    mirrored_rows = topology.MIRROR[topology.TRIANGLES]
    mirrored = -facing(mesh, mirrored_rows)  # a mirrored triangle runs the other way round
    use_mirror = (own < threshold) & (mirrored > own + advantage)
    rows = np.flatnonzero(use_mirror)
    src_triangles[rows] = mesh[mirrored_rows[rows], :2]
    return src_triangles, int(rows.size)


def texture_transform(mesh: Points, config: MeshSourceConfig) -> NDArray[np.float64]:
    """Photo -> texture similarity: eye line level, face height fixed, face centred."""
    eye_vector = mesh[list(topology.LEFT_EYE), :2].mean(0) - mesh[list(topology.RIGHT_EYE), :2].mean(0)
    angle = float(np.degrees(np.arctan2(eye_vector[1], eye_vector[0])))
    face_height = float(np.linalg.norm(mesh[topology.FOREHEAD_TOP, :2] - mesh[topology.CHIN_BOTTOM, :2]))
    scale = config.face_height_in_texture * config.texture_size / max(face_height, 1.0)
    centre = (mesh[:, :2].min(0) + mesh[:, :2].max(0)) / 2.0
    matrix = cv2.getRotationMatrix2D((float(centre[0]), float(centre[1])), angle, scale)
    matrix[:, 2] += config.texture_size / 2.0 - centre
    return np.asarray(matrix, np.float64)


def crop_texture(image: Frame, matrix: NDArray[np.float64], size: int) -> NDArray[np.uint8]:
    """The texture crop; a large photo is area-reduced first so the crop is not aliased."""
    scale = float(np.sqrt(abs(np.linalg.det(matrix[:, :2]))))
    if scale < 0.7:
        reduced_size = (max(1, round(image.shape[1] * scale)), max(1, round(image.shape[0] * scale)))
        image = np.asarray(cv2.resize(image, reduced_size, interpolation=cv2.INTER_AREA), np.uint8)
        matrix = matrix.copy()
        matrix[:, :2] /= scale
    crop = cv2.warpAffine(
        image, matrix, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
    )
    return np.ascontiguousarray(crop, dtype=np.uint8)


_FACE_OVAL = np.array(topology.FACE_OVAL)
_BROWS = np.array(topology.RIGHT_EYEBROW + topology.LEFT_EYEBROW)


def lowered_outline(mesh: Points, drop: float) -> Points:
    """The face-oval polygon with the part above the brows pulled down towards them (hairline margin)."""
    outline = mesh[_FACE_OVAL, :2].astype(np.float32)
    brow_y = float(mesh[_BROWS, 1].mean())
    above = outline[:, 1] < brow_y
    outline[above, 1] += drop * (brow_y - outline[above, 1])
    return outline


@dataclass(frozen=True)
class SourceMasks:
    """Everything build_masks derives from the texture crop, float32 in texture space."""

    texture: NDArray[np.uint8]  # [S,S,3], occluders filled when the skin mask is on
    face_alpha: Mask  # the whole face (source eyes and mouth shown)
    features_cut: Mask  # 1 on the eyes and inner mouth (the target's are kept there)
    lips_mask: Mask
    skin: SkinFill | None
    upness: NDArray[np.float32]  # [S,1] 0 below the brows .. 1 at the top of the outline
    outline_alpha: Mask  # face_alpha before the skin mask: the face's own edge


def build_masks(texture: NDArray[np.uint8], mesh: Points, config: MeshSourceConfig) -> SourceMasks:
    """The paste masks of a texture crop and, with `skin_mask`, the texture with its occluders filled."""
    size = (texture.shape[1], texture.shape[0])
    face_height = float(np.linalg.norm(mesh[topology.FOREHEAD_TOP, :2] - mesh[topology.CHIN_BOTTOM, :2]))

    def loop(indices: tuple[int, ...]) -> Points:
        return mesh[list(indices), :2]

    outline = lowered_outline(mesh, config.forehead_drop)
    face_region = fill_polygons_cpu(size, [outline])
    brow_y = float(mesh[list(topology.RIGHT_EYEBROW) + list(topology.LEFT_EYEBROW), 1].mean())
    top_y = float(outline[:, 1].min())
    rows = np.arange(size[1], dtype=np.float32)[:, None]
    upness = np.clip((brow_y - rows) / max(brow_y - top_y, 1.0), 0.0, 1.0)
    feather_px = face_height * (
        config.edge_feather + (config.forehead_feather - config.edge_feather) * upness
    )
    face_alpha = feather_inside_cpu(face_region, np.broadcast_to(feather_px, (size[1], size[0])))

    def hole(outline: tuple[int, ...], triangles: NDArray[np.int32]) -> list[Points]:
        # the outline and the fill triangles: where a closed (folded) lid or lip line puts a hole
        # triangle outside its outline, target pixels of that hole still land inside the cut
        return [loop(outline)] + [mesh[triangle, :2] for triangle in triangles]

    eye_outlines = hole(topology.RIGHT_EYE, topology.RIGHT_EYE_HOLE) + hole(
        topology.LEFT_EYE, topology.LEFT_EYE_HOLE
    )
    eyes = fill_polygons_cpu(size, eye_outlines)
    eye_cut = feather_inside_cpu(eyes, config.eye_feather * face_height)
    mouth_outlines = hole(topology.LIPS_INNER, topology.INNER_MOUTH_HOLE)
    inner_mouth = fill_polygons_cpu(size, mouth_outlines)
    mouth_cut = feather_outside_cpu(
        inner_mouth, max(0.008 * face_height, MIN_CUT_MARGIN_PX), 0.02 * face_height
    )
    lips = fill_polygons_cpu(size, [loop(topology.LIPS_OUTER)])
    lips_mask = feather_outside_cpu(lips, 0.01 * face_height, 0.04 * face_height)

    skin: SkinFill | None = None
    if config.skin_mask:
        features = feature_region(mesh, size, eye_outlines + mouth_outlines + [loop(topology.LIPS_OUTER)])
        skin = fill_occluders(
            texture,
            mesh,
            features,
            face_region,
            face_height,
            config.skin,
            config.occluder_fill,
            beard_symmetry=config.beard_symmetry,
        )
        texture = skin.texture
    outline_alpha = face_alpha
    if skin is not None:
        face_alpha = face_alpha * skin.paste
    return SourceMasks(
        texture, face_alpha, np.maximum(eye_cut, mouth_cut), lips_mask, skin, upness, outline_alpha
    )


def depth(region: NDArray[np.bool_], *, precise: bool = True) -> NDArray[np.float32]:
    """Texture px from each pixel of `region` to the nearest pixel outside it (0 outside); `precise`
    False: the 5 x 5 chamfer distance (gpu_ops.masks.feather_outside_cpu)."""
    inside = region.astype(np.uint8)
    mask = cv2.DIST_MASK_PRECISE if precise else cv2.DIST_MASK_5
    return np.asarray(cv2.distanceTransform(inside, cv2.DIST_L2, mask), np.float32)


def rim_zone(outline_alpha: Mask, width_px: float) -> NDArray[np.uint8]:
    """[S,S] 255 on the face's outline falling smoothly to 0 at `width_px` inside it (and 0 outside)."""
    inside = outline_alpha > 0.0
    zone = (1.0 - smoothstep(depth(inside) / np.float32(max(width_px, 1.0)))) * inside
    return _to_uint8(zone.astype(np.float32))


def band_masks(
    alpha: Mask,
    outline_alpha: Mask,
    widths_px: list[NDArray[np.float32]],
    holes: Mask | None = None,
    hole_widths_px: tuple[float, ...] = (),
) -> NDArray[np.uint8]:
    """[S,S,B] masks of the multi-band blend's coarser levels for the paste mask `alpha` (the whole
    face) or `alpha * (1 - holes)` (eyes and inner mouth cut). Level k's mask rises from 0 at the
    face's outline to 1 at `widths_px[k]` inside it (per row: wider at the forehead), and never above
    the paste mask itself; with `hole_widths_px` it also rises from the holes over those widths. So
    every coarser band fades in further inside than the finer ones: at the edge the tone is the
    target's and only the source's detail shows, inside all bands together give the source."""

    edge_depth = depth(outline_alpha > 0.0)
    paste = alpha if holes is None else alpha * (1.0 - holes)
    hole_depth = depth(holes < 0.5) if holes is not None and any(w > 0 for w in hole_widths_px) else None
    masks: list[NDArray[np.float32]] = []
    for level, width in enumerate(widths_px):
        ramp = np.asarray(edge_depth / np.maximum(width, np.float32(1.0)), np.float32)
        mask = np.minimum(paste, smoothstep(ramp))
        if hole_depth is not None:
            mask = mask * smoothstep(hole_depth / np.float32(max(hole_widths_px[level], 1.0)))
        masks.append(mask)
    return np.dstack([_to_uint8(mask) for mask in masks])


def _to_uint8(mask: NDArray[np.float32]) -> NDArray[np.uint8]:
    return np.clip(mask * 255.0 + 0.5, 0, 255).astype(np.uint8)


def build_mesh_source(image: Frame, mesh_in_image: Points, config: MeshSourceConfig) -> MeshSource:
    """A MeshSource from a photo and its face's 468-point mesh (photo px)."""
    yaw = yaw_degrees(mesh_in_image)
    if abs(yaw) > config.max_source_yaw_degrees:
        raise NoFaceError(
            f"source face is turned {yaw:+.0f} degrees (limit {config.max_source_yaw_degrees:.0f}); "
            "use a more frontal photo"
        )
    matrix = texture_transform(mesh_in_image, config)
    texture = crop_texture(image, matrix, config.texture_size)
    scale = float(np.sqrt(abs(np.linalg.det(matrix[:, :2]))))
    mesh = np.empty_like(mesh_in_image, dtype=np.float32)
    mesh[:, :2] = mesh_in_image[:, :2] @ matrix[:, :2].T.astype(np.float32) + matrix[:, 2].astype(np.float32)
    mesh[:, 2] = mesh_in_image[:, 2] * scale
    if config.cull_back_faces and abs(yaw) >= config.min_yaw_for_mirror_degrees:
        src_triangles, mirrored = cull_to_mirror(mesh, config.facing_threshold, config.mirror_advantage)
    else:
        src_triangles, mirrored = mesh[topology.ALL_TRIANGLES, :2].astype(np.float32), 0
    masks = build_masks(texture, mesh, config)
    face_height = float(np.linalg.norm(mesh[topology.FOREHEAD_TOP, :2] - mesh[topology.CHIN_BOTTOM, :2]))
    cut_alpha = masks.face_alpha * (1.0 - masks.features_cut)
    widths_px = [
        (face_height * (low + (high - low) * masks.upness)).astype(np.float32)
        for low, high in zip(config.band_widths, config.forehead_band_widths, strict=True)
    ]
    source = MeshSource(
        texture=np.dstack([masks.texture, _to_uint8(masks.face_alpha)]),
        texture_features_cut=np.dstack([masks.texture, _to_uint8(cut_alpha)]),
        lips_mask=_to_uint8(masks.lips_mask),
        band_masks=band_masks(masks.face_alpha, masks.outline_alpha, widths_px),
        band_masks_features_cut=band_masks(
            masks.face_alpha,
            masks.outline_alpha,
            widths_px,
            masks.features_cut,
            tuple(w * face_height for w in config.hole_band_widths),
        ),
        rim_zone=rim_zone(masks.outline_alpha, config.rim_zone_width * face_height),
        mesh=mesh,
        src_triangles=np.ascontiguousarray(src_triangles),
        mouth_openness=mouth_openness(mesh),
        yaw_degrees=yaw,
        mirrored_triangles=mirrored,
        occluded_share=masks.skin.occluded_share if masks.skin else 0.0,
    )
    for name in get_args(TextureName):
        getattr(source, name)[BLANK_TEXEL] = 0
    logger.info(
        "mesh source prepared: yaw %+.0f deg, %d triangles mirrored, mouth openness %.2f, "
        "not skin %.1f %% of the face (%.1f %% filled from the mirror side)",
        yaw,
        mirrored,
        source.mouth_openness,
        100.0 * source.occluded_share,
        100.0 * (masks.skin.mirrored_share if masks.skin else 0.0),
    )
    return source
