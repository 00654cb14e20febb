"""The light fitted on a face's mesh (face_light.py) on a synthetic face lit from one side: the stored
468-point mesh, each triangle flat-shaded by Lambert's law from its normal, then the occlusion mask."""

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.masks import fill_polygons_cpu
from gpu_ops.skin_model import LUMA_WEIGHTS
from models import face_mesh_topology as topology
from models.face import Frame
from streamer.pipeline.swap_engines.face_light import expected_luma, fit_light, vertex_normals
from streamer.pipeline.swap_engines.mesh_occlusion import LIGHT_FRAMES, OcclusionTrack, face_occlusion
from tests.unit.streamer.pipeline.test_mesh_engine import FRONTAL_MESH, place

Points = NDArray[np.float32]
SKIN = np.array([200, 150, 125], np.float32)  # lit fully
LIGHTS = [(0.8, 0.0, 0.6), (0.95, 0.0, 0.3), (0.7, -0.5, 0.5), (-0.9, 0.2, 0.4)]  # from the side, above


def side_lit_face(
    light: tuple[float, float, float], ambient: float = 0.1, height: float = 60.0, x: float = 40.0
) -> tuple[Frame, Points]:
    """A face `height` px tall (60: the occlusion mask's working size), each triangle shaded by
    ambient + (1 - ambient) * max(0, n . light) with the normal's sign chosen to face the camera."""
    mesh = place(FRONTAL_MESH, (x, 40), height)
    normals = vertex_normals(mesh)
    towards_camera = -1.0 if normals[topology.NOSE_TIP, 2] < 0 else 1.0
    direction = np.array(light, np.float32) / np.linalg.norm(light)
    image = np.full((80, 140, 3), 40, np.uint8)
    for triangle in topology.TRIANGLES:
        normal = towards_camera * normals[triangle].mean(axis=0)
        shade = ambient + (1.0 - ambient) * max(
            0.0, float(normal @ direction) / float(np.linalg.norm(normal))
        )
        colour = tuple(float(v) for v in SKIN * shade)
        cv2.fillConvexPoly(image, np.round(mesh[triangle, :2] * 16).astype(np.int32), colour, cv2.LINE_AA, 4)
    return image, mesh


def skin_vertices(mesh: Points, size: tuple[int, int]) -> NDArray[np.bool_]:
    oval = fill_polygons_cpu(size, [mesh[list(topology.FACE_OVAL), :2]]) > 0
    columns = np.clip(np.rint(mesh[:, 0]).astype(int), 0, size[0] - 1)
    rows = np.clip(np.rint(mesh[:, 1]).astype(int), 0, size[1] - 1)
    return np.asarray(oval[rows, columns], bool)


def test_the_fitted_light_follows_a_side_light_and_its_shadow() -> None:
    image, mesh = side_lit_face(LIGHTS[0], ambient=0.25)
    size = (image.shape[1], image.shape[0])
    normals = vertex_normals(mesh)
    usable = skin_vertices(mesh, size)
    light = fit_light(image, mesh[:, :2], normals, usable, 60.0)
    assert light is not None
    expected = expected_luma(light, mesh[:, :2], normals, size, 60.0, float(SKIN @ LUMA_WEIGHTS))
    luma = image.astype(np.float32) @ LUMA_WEIGHTS
    inside = cv2.erode(fill_polygons_cpu(size, [mesh[list(topology.FACE_OVAL), :2]]), np.ones((5, 5))) > 0
    assert np.isfinite(expected[inside]).all()
    # dark for score_skin is under 0.55 of the reference: against the face's median a quarter of it is
    # (the shadowed half), against the fitted light only the terminator's few pixels
    below_median = luma[inside] / np.median(luma[inside]) < 0.55
    below_light = luma[inside] / expected[inside] < 0.55
    assert below_median.mean() > 0.2 and below_light.mean() < 0.03
    assert np.median(luma[inside] / expected[inside]) == pytest.approx(1.0, abs=0.1)
    left = inside & (np.arange(size[0])[None, :] < mesh[topology.NOSE_TIP, 0])
    darker, brighter = sorted([luma[left].mean(), luma[inside & ~left].mean()])
    assert darker < 0.6 * brighter  # the face really is side-lit


def test_too_few_skin_vertices_give_no_light() -> None:
    image, mesh = side_lit_face(LIGHTS[0])
    usable = np.zeros(len(mesh), bool)
    usable[:30] = True
    assert fit_light(image, mesh[:, :2], vertex_normals(mesh), usable, 60.0) is None


@pytest.mark.parametrize("light", LIGHTS)
def test_the_shadowed_side_is_no_occluder(light: tuple[float, float, float]) -> None:
    """(Without the fitted light the mask took 12-28 % of these faces' ovals.)"""
    image, mesh = side_lit_face(light)
    assert face_occlusion(image, mesh).cover < 0.02


def test_a_black_patch_in_the_shadow_is_still_an_occluder() -> None:
    image, mesh = side_lit_face(LIGHTS[0], ambient=0.25)
    luma = image.astype(np.float32) @ LUMA_WEIGHTS
    cheek = min((mesh[index, :2] for index in (205, 425)), key=lambda at: luma[round(at[1]), round(at[0])])
    assert luma[round(cheek[1]), round(cheek[0])] < 0.5 * float(SKIN @ LUMA_WEIGHTS)  # in the shadow
    painted = image.copy()
    x, y = round(float(cheek[0])), round(float(cheek[1]))
    cv2.circle(painted, (x, y), 5, (12, 12, 14), -1)
    occlusion = face_occlusion(painted, mesh)
    assert occlusion.mask[y // occlusion.factor, x // occlusion.factor] > 0.5


def test_a_track_keeps_its_light_fit_while_the_face_moves() -> None:
    """On a face track the light is fitted every LIGHT_FRAMES frames and kept in between, scaled with the
    face: a side-lit face moving across the frame and nearer (its box following it, the face growing in
    the working copy) stays free of false occlusion throughout."""
    track = OcclusionTrack()
    fits = []
    for step in range(2 * LIGHT_FRAMES + 1):
        image, mesh = side_lit_face(LIGHTS[0], height=52.0 + 1.5 * step, x=40.0 + 4.0 * step)
        before = track.light
        occlusion = face_occlusion(image, mesh, (5.0 * step, 2.0 * step), 1.0, track)
        fits.append(track.light is not before)
        assert occlusion.cover < 0.02
    assert fits == [step % LIGHT_FRAMES == 0 for step in range(2 * LIGHT_FRAMES + 1)]
