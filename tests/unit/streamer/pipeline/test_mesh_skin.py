"""Source skin mask on a synthetic face (the stored 468-point mesh, painted skin, dark brows and eyes).

An occluder on one cheek is filled from the other cheek; on both cheeks it is left to the target;
dark below the nose (a beard) is kept, a patch far darker than the stubble opposite is not; a dark patch
reaching the mouth corner goes whole, up to the lips; features are never occluders; under a strong side
light the bright side does not fill the shaded one; `occluder_fill="target"` never mirrors.
"""

from dataclasses import replace

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.masks import fill_polygons_cpu
from gpu_ops.skin_model import SkinThresholds
from models import face_mesh_topology as topology
from models.face import Frame
from streamer.pipeline.swap_engines.mesh_skin import SkinFill, feature_region, fill_occluders
from streamer.pipeline.swap_engines.mesh_source import (
    MeshSourceConfig,
    build_mesh_source,
    lowered_outline,
    texture_transform,
)
from tests.unit.streamer.pipeline.test_mesh_engine import FRONTAL_MESH, place

SKIN = np.array([200.0, 150.0, 125.0], np.float32)
Points = NDArray[np.float32]


def synthetic_face(
    side_light: float = 0.0, seed: int = 0, skin: NDArray[np.float32] = SKIN
) -> tuple[Frame, Points]:
    """A 400 px photo of a skin-coloured face with dark brows, eyes and lips, on a blue background."""
    mesh = place(FRONTAL_MESH, (200, 210), 240)
    rng = np.random.default_rng(seed)
    image = np.zeros((400, 400, 3), np.float32)
    image[:] = (40, 70, 140)
    face = fill_polygons_cpu((400, 400), [mesh[list(topology.FACE_OVAL), :2]]) > 0
    columns = np.linspace(-1, 1, 400, dtype=np.float32)[None, :, None]
    # a light from the image-right: the terminator runs down the nose, the far cheek is in shade
    lit = skin * (1.0 + side_light * np.tanh(6.0 * columns)) + rng.normal(0, 3, (400, 400, 3))
    image[face] = lit[face]
    for brow in (topology.RIGHT_EYEBROW, topology.LEFT_EYEBROW):  # as feature_region outlines them
        hull = cv2.convexHull(mesh[list(brow), :2].astype(np.float32)).reshape(-1, 2)
        cv2.fillPoly(image, [np.round(hull).astype(np.int32)], (60, 45, 35))
    for loop, colour in (
        (topology.RIGHT_EYE, (235, 235, 235)),
        (topology.LEFT_EYE, (235, 235, 235)),
        (topology.LIPS_OUTER, (170, 80, 80)),
    ):
        cv2.fillPoly(image, [np.round(mesh[list(loop), :2]).astype(np.int32)], colour)
    return np.clip(image, 0, 255).astype(np.uint8), mesh


def cheek_band(mesh: Points, side: int) -> tuple[tuple[int, int], tuple[int, int], int]:
    """A band across one cheek (side 0: subject's right, image-left), 8 % of the face height thick."""
    centre = mesh[50 if side == 0 else 280, :2]
    direction = np.array([np.cos(np.radians(30)), -np.sin(np.radians(30)) * (1 if side == 0 else -1)])
    face_height = float(np.linalg.norm(mesh[topology.FOREHEAD_TOP, :2] - mesh[topology.CHIN_BOTTOM, :2]))
    a = np.round(centre - 0.09 * face_height * direction).astype(int)
    b = np.round(centre + 0.09 * face_height * direction).astype(int)
    return (int(a[0]), int(a[1])), (int(b[0]), int(b[1])), int(0.08 * face_height)


def filled(image: Frame, mesh: Points, config: MeshSourceConfig | None = None) -> tuple[SkinFill, NDArray[np.float64], Points]:  # fmt: skip
    """fill_occluders on the texture crop of `image`, as build_masks calls it; returns the fill, the
    photo -> texture matrix and the mesh in texture px."""
    config = config or MeshSourceConfig()
    plain = build_mesh_source(image, mesh, replace(config, skin_mask=False))
    texture_mesh = plain.mesh
    size = (plain.texture.shape[1], plain.texture.shape[0])
    face_height = float(np.linalg.norm(texture_mesh[topology.FOREHEAD_TOP, :2] - texture_mesh[topology.CHIN_BOTTOM, :2]))  # fmt: skip
    outlines = [
        texture_mesh[list(loop), :2] for loop in (topology.RIGHT_EYE, topology.LEFT_EYE, topology.LIPS_OUTER)
    ]
    features = feature_region(texture_mesh, size, outlines)
    region = fill_polygons_cpu(size, [lowered_outline(texture_mesh, config.forehead_drop)])
    fill = fill_occluders(
        np.ascontiguousarray(plain.texture[..., :3]), texture_mesh, features, region, face_height, config.skin,
        config.occluder_fill,
    )  # fmt: skip
    return fill, texture_transform(mesh, config), texture_mesh


def painted_region(image: Frame, painted: Frame, matrix: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Where `painted` differs from `image`, in texture px, shrunk by 3 px (the band's core)."""
    changed = ((painted != image).any(axis=2) * 255).astype(np.uint8)
    warped = cv2.warpAffine(changed, matrix, (384, 384))
    return cv2.erode((warped > 127).astype(np.uint8), np.ones((7, 7), np.uint8)) > 0


@pytest.fixture(scope="module")
def face() -> tuple[Frame, Points]:
    return synthetic_face()


def test_a_band_on_one_cheek_is_filled_from_the_other(face: tuple[Frame, Points]) -> None:
    image, mesh = face
    clean, matrix, texture_mesh = filled(image, mesh)
    painted = image.copy()
    start, end, thickness = cheek_band(mesh, 0)
    cv2.line(painted, start, end, (38, 30, 26), thickness)
    result, _, _ = filled(painted, mesh)
    core = painted_region(image, painted, matrix) & (clean.paste > 0.99)  # the band also leaves the face
    assert core.sum() > 300
    assert result.paste[core].min() > 0.95  # pasted: the fill, not a hole
    difference = result.texture[core].astype(float).mean(axis=0) - clean.texture[core].astype(float).mean(
        axis=0
    )
    assert np.abs(difference).max() < 6.0  # the band's place looks like the skin it hid
    assert result.mirrored_share > clean.mirrored_share + 0.01
    # a clean face keeps all of its own skin; only its rim, where the photo's background begins, goes
    interior = cv2.erode(
        fill_polygons_cpu((384, 384), [lowered_outline(texture_mesh, 0.25)]), np.ones((25, 25), np.uint8)
    )
    assert clean.paste[interior > 0].min() > 0.99 and clean.occluded_share < 0.12


def test_bands_on_both_cheeks_are_left_to_the_target(face: tuple[Frame, Points]) -> None:
    image, mesh = face
    painted = image.copy()
    for side in (0, 1):
        start, end, thickness = cheek_band(mesh, side)
        cv2.line(painted, start, end, (38, 30, 26), thickness)
    result, matrix, _ = filled(painted, mesh)
    clean, _, _ = filled(image, mesh)
    core = painted_region(image, painted, matrix) & (clean.paste > 0.99)
    assert core.sum() > 300
    assert result.paste[core].max() < 0.05


def test_a_beard_stays_and_features_are_never_occluders(face: tuple[Frame, Points]) -> None:
    image, mesh = face
    bearded = image.copy()
    chin = np.round(mesh[[172, 136, 150, 149, 176, 148, 152, 377, 400, 378, 379, 365, 397, 288, 436, 216], :2]).astype(np.int32)  # fmt: skip
    cv2.fillPoly(bearded, [cv2.convexHull(chin)], (58, 42, 34))
    result, matrix, texture_mesh = filled(bearded, mesh)
    clean, _, _ = filled(image, mesh)
    beard = painted_region(image, bearded, matrix) & (clean.paste > 0.99)  # the hull also leaves the face
    assert beard.sum() > 1000
    assert result.paste[beard].mean() > 0.95
    np.testing.assert_allclose(result.texture[beard].astype(float).mean(axis=0), (58, 42, 34), atol=3)
    brows = fill_polygons_cpu((384, 384), [texture_mesh[list(topology.RIGHT_EYEBROW), :2]]) > 0
    assert result.paste[brows].min() > 0.99


def test_a_grey_object_goes_to_the_mirror_or_to_the_target(face: tuple[Frame, Points]) -> None:
    image, mesh = face
    painted = image.copy()
    cv2.circle(painted, tuple(np.round(mesh[205, :2]).astype(int)), 14, (110, 112, 116), -1)
    mirrored, matrix, _ = filled(painted, mesh)
    target_only, _, _ = filled(painted, mesh, MeshSourceConfig(occluder_fill="target"))
    core = painted_region(image, painted, matrix)
    assert core.sum() > 200
    assert mirrored.paste[core].min() > 0.95
    assert np.abs(mirrored.texture[core].astype(float).mean(axis=0) - SKIN).max() < 8.0
    assert target_only.paste[core].max() < 0.05 and target_only.mirrored_share == 0.0


def test_under_a_side_light_the_bright_side_does_not_fill_the_shaded_one() -> None:
    # a dimmer skin, so that the bright side is not clipped at 255 (clipping greys its colour)
    image, mesh = synthetic_face(side_light=0.35, seed=3, skin=np.array([165.0, 122.0, 100.0], np.float32))
    painted = image.copy()
    start, end, thickness = cheek_band(mesh, 0)  # on the shaded (image-left) side
    cv2.line(painted, start, end, (110, 112, 116), thickness)
    result, matrix, _ = filled(painted, mesh, MeshSourceConfig(skin=SkinThresholds()))
    clean, _, _ = filled(image, mesh)
    core = painted_region(image, painted, matrix) & (clean.paste > 0.99)
    assert core.sum() > 300
    assert result.paste[core].max() < 0.05  # the target's own cheek shows, not a too-bright patch
    even_image, even_mesh = synthetic_face(seed=3, skin=np.array([165.0, 122.0, 100.0], np.float32))
    even = even_image.copy()
    cv2.line(even, start, end, (110, 112, 116), thickness)
    evenly_lit, _, _ = filled(even, even_mesh)
    assert evenly_lit.paste[core].min() > 0.95  # the same band on an evenly lit face is mirrored


def stubble(image: Frame, mesh: Points, seed: int = 5) -> Frame:
    """Both lower cheeks and the chin under short dark stubble, below the nose's base: skin between
    hairs a pixel or two wide, a third of it covered."""
    rng = np.random.default_rng(seed)
    hairs = cv2.dilate((rng.random(image.shape[:2]) < 0.12).astype(np.uint8), np.ones((2, 1), np.uint8))
    lower = np.round(mesh[[172, 136, 150, 149, 176, 148, 152, 377, 400, 378, 379, 365, 397, 288, 436, 216], :2]).astype(np.int32)  # fmt: skip
    zone = np.zeros(image.shape[:2], np.uint8)
    cv2.fillPoly(zone, [cv2.convexHull(lower)], 1)
    shade = np.where(hairs > 0, 0.35, 0.85).astype(np.float32)[..., None]
    return np.where(zone[..., None] > 0, image * shade, image).astype(np.uint8)


def test_a_patch_far_darker_than_the_stubble_opposite_is_an_occluder(face: tuple[Frame, Points]) -> None:
    image, mesh = face
    stubbled = stubble(image, mesh)
    patched = stubbled.copy()
    between = 0.55 * mesh[61, :2] + 0.45 * mesh[172, :2]  # between the mouth corner and the jaw
    # the skin's hue, far darker
    cv2.circle(patched, tuple(np.round(between).astype(int)), 14, (40, 30, 25), -1)
    clean, matrix, _ = filled(stubbled, mesh)
    result, _, _ = filled(patched, mesh)
    core = painted_region(stubbled, patched, matrix) & (clean.paste > 0.99)
    assert core.sum() > 200
    assert result.paste[core].min() > 0.95  # filled from the stubble opposite...
    mean_difference = result.texture[core].astype(float).mean(axis=0) - clean.texture[core].mean(axis=0)
    assert np.abs(mean_difference).max() < 8.0  # ...and looks like it
    stubble_only = painted_region(image, stubbled, matrix) & ~core & (clean.paste > 0.99)
    assert clean.paste[stubble_only].mean() > 0.95  # the stubble itself stays


def test_a_dark_patch_reaching_the_mouth_corner_is_taken_up_to_the_lips(face: tuple[Frame, Points]) -> None:
    image, mesh = face
    painted = image.copy()
    corner = mesh[61, :2]
    face_height = float(np.linalg.norm(mesh[topology.FOREHEAD_TOP, :2] - mesh[topology.CHIN_BOTTOM, :2]))
    cv2.circle(painted, tuple(np.round(corner + np.array([-0.05, 0.0]) * face_height).astype(int)), 13, (38, 30, 26), -1)  # fmt: skip
    result, matrix, texture_mesh = filled(painted, mesh)
    clean, _, _ = filled(image, mesh)
    lips = fill_polygons_cpu((384, 384), [texture_mesh[list(topology.LIPS_OUTER), :2]]) > 0
    near_lips = cv2.dilate(lips.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    core = painted_region(image, painted, matrix) & ~near_lips & (clean.paste > 0.99)
    assert core.sum() > 150
    # no part of the patch beside the lips is pasted dark: it is filled like the rest of it
    assert result.texture[core].astype(float).mean(axis=1).min() > 100.0
    assert result.paste[core].min() > 0.9
    assert result.paste[lips & (clean.paste > 0.99)].mean() > 0.95  # the lips themselves stay
