"""Mesh engine on real photos, issue 12: nothing in front of the source's face reaches the target, the
pasted edge does not show (nor paints skin over what lies past the target's own face), and the skin
tone does not pump while the face moves (-s prints numbers).

Each check also runs the engine with the fix switched off (MeshConfig) and shows that it fails there.
"""

import dataclasses
import itertools
from pathlib import Path

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.masks import fill_polygons_cpu
from models import face_mesh_topology as topology
from models.face import Frame
from streamer.pipeline.swap_engines import mesh as mesh_engine
from streamer.pipeline.swap_engines.base import StreamMemory, SwapOptions
from streamer.pipeline.swap_engines.mesh import MeshConfig, MeshEngine
from streamer.pipeline.swap_engines.mesh_source import lowered_outline
from tests.integration.test_mesh_quality import faces_of, load


def paint_cheek_band(image: Frame, mesh: NDArray[np.float32]) -> Frame:
    """A dark band (hair, a shadow) 8 % of the face height thick across the subject's right cheek."""
    face_height = float(np.linalg.norm(mesh[10, :2] - mesh[152, :2]))
    direction = np.array([np.cos(np.radians(30)), -np.sin(np.radians(30))])
    start = np.round(mesh[50, :2] - 0.09 * face_height * direction).astype(int)
    end = np.round(mesh[50, :2] + 0.09 * face_height * direction).astype(int)
    painted = image.copy()
    cv2.line(
        painted,
        (int(start[0]), int(start[1])),
        (int(end[0]), int(end[1])),
        (38, 30, 26),
        int(0.08 * face_height),
    )
    return painted


def cheek_triangles(mesh: NDArray[np.float32], band: NDArray[np.bool_]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:  # fmt: skip
    """Rows of topology.TRIANGLES on that cheek (outline to nose, lower lid to mouth corner): those whose
    centre lies under the band, and the rest of the cheek."""
    centres = mesh[topology.TRIANGLES, :2].mean(axis=1)
    face_height = float(np.linalg.norm(mesh[10, :2] - mesh[152, :2]))
    cheek = (
        (centres[:, 0] > mesh[234, 0])
        & (centres[:, 0] < mesh[129, 0])
        & (centres[:, 1] > mesh[145, 1] + 0.02 * face_height)
        & (centres[:, 1] < mesh[61, 1])
    )
    pixels = np.round(centres).astype(int)
    under = band[pixels[:, 1], pixels[:, 0]]
    return np.flatnonzero(cheek & under), np.flatnonzero(cheek & ~under)


def triangles_mean(image: Frame, mesh: NDArray[np.float32], rows: NDArray[np.int64]) -> NDArray[np.float64]:
    inside = fill_polygons_cpu(
        (image.shape[1], image.shape[0]), [mesh[t, :2] for t in topology.TRIANGLES[rows]]
    )
    return image[inside > 0].astype(np.float64).mean(axis=0)


@pytest.mark.parametrize("source_name", ["fr_obama.jpg", "skimage_astronaut.png"])
def test_a_dark_band_across_the_source_cheek_does_not_reach_the_target(
    engine: MeshEngine, media_dir: Path, source_name: str
) -> None:
    """The band's triangles on the swapped target keep the tone they have when the source is clean,
    relative to the rest of that cheek: within 10 levels per channel (the fill comes from the other
    cheek, whose light is matched but whose highlight is its own; measured 2-8 levels). With the
    source skin mask switched off the band lands on the target (about 100 levels)."""
    image = load(media_dir, source_name)
    mesh = faces_of(engine, image)[0].mesh
    assert mesh is not None
    painted = paint_cheek_band(image, mesh)
    under, rest = cheek_triangles(mesh, (painted != image).any(axis=2))
    assert len(under) >= 8 and len(rest) >= 40
    off = MeshConfig(source=dataclasses.replace(MeshConfig().source, skin_mask=False))
    worst = {}
    for name, config in (("skin mask", MeshConfig()), ("switched off", off)):
        configured = MeshEngine(engine.detector, engine.landmarker, config)
        clean, banded = configured.prepare_source(image), configured.prepare_source(painted)
        excess = []
        for target_name in ("fr_biden2.jpg", "fr_obama2.jpg", "fr_alex_lacamoire2.jpg"):
            target = load(media_dir, target_name)
            face = faces_of(engine, target)[0]
            assert face.mesh is not None
            contrast = []
            for source in (clean, banded):
                swapped = configured.swap(target, [face], source, SwapOptions())
                contrast.append(
                    triangles_mean(swapped, face.mesh, under) - triangles_mean(swapped, face.mesh, rest)
                )
            excess.append(float(np.abs(contrast[1] - contrast[0]).max()))
        worst[name] = excess
    print(f"\n{source_name}: band tone vs rest of cheek, banded minus clean source, per target: {worst}")
    assert max(worst["skin mask"]) <= 10.0
    assert min(worst["switched off"]) > 20.0


def luma_gradient(image: Frame) -> NDArray[np.float32]:
    """Gradient magnitude (levels per pixel) of the luma, smoothed over 2 px so pores and JPEG blocks
    weigh less than an edge."""
    luma = cv2.GaussianBlur(
        image.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32), (0, 0), 2.0
    )
    return np.asarray(np.hypot(cv2.Sobel(luma, cv2.CV_32F, 1, 0), cv2.Sobel(luma, cv2.CV_32F, 0, 1)) / 8.0)


def seam_ratio(target: Frame, swapped: Frame, mesh: NDArray[np.float32], forehead_drop: float) -> float:
    """Gradient along the pasted region's edge after the swap (the band from the hull line to 2.5 % of the
    face height inside it) over the largest of the target's own gradients there, just inside (2.5-5 %)
    and just outside (0-2.5 %) it. Above 1: the edge shows more than anything the target has there.
    The target's own gradient in the band itself counts: without it a swap that changes nothing would
    score above 1 where the target's jaw line runs along the hull (fr_biden2.jpg: 1.015)."""
    face_height = float(np.linalg.norm(mesh[10, :2] - mesh[152, :2]))
    hull = fill_polygons_cpu((target.shape[1], target.shape[0]), [lowered_outline(mesh, forehead_drop)])
    depth = cv2.distanceTransform(hull, cv2.DIST_L2, 3) - cv2.distanceTransform(255 - hull, cv2.DIST_L2, 3)
    width = 0.025 * face_height
    edge = (depth >= 0) & (depth <= width)
    inside, outside = (depth > width) & (depth <= 2 * width), (depth < 0) & (depth >= -width)
    swapped_gradient, target_gradient = luma_gradient(swapped), luma_gradient(target)
    own = max(target_gradient[band].mean() for band in (edge, inside, outside))
    return float(swapped_gradient[edge].mean() / own)


SEAM_PAIRS = (
    ("fr_obama.jpg", "skimage_astronaut.png"),  # dark source, pale targets: where a line showed
    ("fr_obama.jpg", "fr_biden2.jpg"),
    ("fr_biden.jpg", "skimage_astronaut.png"),
    ("fr_biden.jpg", "fr_lin_manuel_miranda.png"),
    ("fr_alex_lacamoire1.jpg", "fr_biden2.jpg"),
    ("fr_alex_lacamoire1.jpg", "fr_lin_manuel_miranda.png"),
)


# the engine before the rim guard, with the narrow tone band it had (its mean seam ratio: 1.06)
# the engine before the rim guard (and before the target occlusion mask, which keeps hair at the
# temples too): the comparison the edge test makes
NARROW_TONE_NO_GUARD = MeshConfig(
    source=dataclasses.replace(MeshConfig().source, band_widths=(0.03, 0.045, 0.06)),
    rim_guard=None,
    occlusion=None,
)


def test_the_pasted_edge_shows_no_more_than_the_target_around_it(engine: MeshEngine, media_dir: Path) -> None:
    """The multi-band blend takes the edge's tone from the target and the rim guard leaves it the
    shadow, hair and background inside the outline: the edge shows no more than the target's own
    gradients, 5 pairs of 6 below them and the sixth 0.7 % above (0.88-1.007, mean 0.94: a smiling
    target's chin shadow along the hull). The engine without the guard and with a narrow tone band
    reached 1.20, and one feathered alpha is worse than the multi-band blend on every pair.
    With the target occlusion mask (issue 18) two targets keep what is in front of them at the edge, a
    hair fringe (skimage_astronaut) and a microphone (fr_lin_manuel_miranda): their own texture in the
    edge band moves those pairs by 0.014-0.015 (mean 0.943 -> 0.951), so the mean's bound is 0.955."""
    engines = {
        "now": engine,
        "narrow tone, no guard": MeshEngine(engine.detector, engine.landmarker, NARROW_TONE_NO_GUARD),
        "feather": MeshEngine(engine.detector, engine.landmarker, MeshConfig(blend="feather")),
    }
    drop = engine.config.source.forehead_drop
    ratios: dict[str, list[float]] = {name: [] for name in engines}
    for source_name, target_name in SEAM_PAIRS:
        target = load(media_dir, target_name)
        face = faces_of(engine, target)[0]
        assert face.mesh is not None
        for name, configured in engines.items():
            source = configured.prepare_source(load(media_dir, source_name))
            swapped = configured.swap(target, [face], source, SwapOptions())
            ratios[name].append(seam_ratio(target, swapped, face.mesh, drop))
    print(
        "\nedge gradient / target's own around it:",
        {k: [round(v, 3) for v in vs] for k, vs in ratios.items()},
    )
    assert max(ratios["now"]) <= 1.01 and np.mean(ratios["now"]) <= 0.955
    assert sum(ratio <= 1.0 for ratio in ratios["now"]) >= 5
    assert max(ratios["narrow tone, no guard"]) > 1.1
    assert all(now < feathered for now, feathered in zip(ratios["now"], ratios["feather"]))


def test_an_outline_past_the_face_keeps_the_dark_surroundings(engine: MeshEngine, media_dir: Path) -> None:
    """A landmark fit that runs past the face (the mesh 8 % too large, as a broad smile or a turned head
    gives): in the ring between the true outline and the fitted one, what is dark (background, hair,
    the shadow under the chin) changes well under half as much with the rim guard as without it, and
    the lit skin in that ring is pasted alike (measured: 4-7 levels against 12-18; lit 5-21 both)."""
    unguarded = MeshEngine(
        engine.detector, engine.landmarker, dataclasses.replace(engine.config, rim_guard=None)
    )
    source_image = load(media_dir, "fr_obama.jpg")
    sources = {id(configured): configured.prepare_source(source_image) for configured in (engine, unguarded)}
    for target_name in ("skimage_astronaut.png", "fr_biden2.jpg", "fr_lin_manuel_miranda.png"):
        target = load(media_dir, target_name)
        face = faces_of(engine, target)[0]
        assert face.mesh is not None
        centre = face.mesh[:, :2].mean(axis=0)
        fitted = face.mesh.copy()
        fitted[:, :2] = centre + (face.mesh[:, :2] - centre) * 1.08
        size = (target.shape[1], target.shape[0])
        drop = engine.config.source.forehead_drop
        true_face = fill_polygons_cpu(size, [lowered_outline(face.mesh, drop)]) > 0
        ring = (fill_polygons_cpu(size, [lowered_outline(fitted, drop)]) > 0) & ~true_face
        luma = target.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
        face_luma = float(luma[true_face].mean())
        dark, lit = ring & (luma < 0.5 * face_luma), ring & (luma > 0.8 * face_luma)
        assert dark.sum() > 300 and lit.sum() > 300
        change = {}
        for name, configured in (("guard", engine), ("no guard", unguarded)):
            swapped = configured.swap(
                target, [dataclasses.replace(face, mesh=fitted)], sources[id(configured)], SwapOptions()
            )
            difference = np.abs(swapped.astype(np.float32) - target.astype(np.float32)).max(axis=2)
            change[name] = (float(difference[dark].mean()), float(difference[lit].mean()))
        print(f"\n{target_name}: mean change on the ring's dark and lit pixels {change}")
        assert change["guard"][0] < 0.5 * change["no guard"][0]
        assert abs(change["guard"][1] - change["no guard"][1]) < 1.0


def test_colour_statistics_hold_still_under_motion_and_follow_a_change_of_light(
    engine: MeshEngine, media_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A nodding, talking target (the face box 4 % taller and shorter by turns, the mouth opening, 1 px
    landmark noise) in constant light: the shading ratio the engine applies moves 2-4 % per frame when
    measured alone, under a quarter of that with the stream's memory. Then the light drops by 30 %:
    the remembered ratio follows within a frame."""
    applied: list[NDArray[np.float32]] = []
    original = mesh_engine.apply_shading_ratio

    def recording(patch: Frame, ratio: NDArray[np.float32]) -> Frame:
        applied.append(np.asarray(ratio, np.float32).copy())
        return original(patch, ratio)  # type: ignore[no-any-return]

    monkeypatch.setattr(mesh_engine, "apply_shading_ratio", recording)
    source = engine.prepare_source(load(media_dir, "fr_biden.jpg"))
    target = load(media_dir, "skimage_astronaut.png")
    face = faces_of(engine, target)[0]
    assert face.mesh is not None
    face_height = float(np.linalg.norm(face.mesh[10, :2] - face.mesh[152, :2]))
    rng = np.random.default_rng(0)
    meshes = []
    for index in range(24):
        mesh = face.mesh.copy()
        middle = float(mesh[:, 1].mean())
        mesh[:, 1] = middle + (mesh[:, 1] - middle) * (1.04 if index % 2 else 0.96)
        if index % 4 >= 2:
            mesh[mesh[:, 1] > (mesh[13, 1] + mesh[14, 1]) / 2, 1] += 0.05 * face_height
        mesh[:, :2] += rng.normal(0, 1.0, (len(mesh), 2)).astype(np.float32)
        meshes.append(mesh)

    def steps(options: SwapOptions, frames: list[Frame]) -> list[NDArray[np.float32]]:
        applied.clear()
        for frame, mesh in zip(frames, meshes):
            engine.swap(frame, [dataclasses.replace(face, mesh=mesh)], source, options)
        # grids of different shapes (measured alone) compared at one size, in the log domain
        return [np.asarray(cv2.resize(np.log(ratio), (16, 20)), np.float32) for ratio in applied]

    def change_per_frame(maps: list[NDArray[np.float32]]) -> float:
        return float(np.mean([np.abs(b - a).mean() for a, b in itertools.pairwise(maps)]))

    steady = [target] * len(meshes)
    alone = change_per_frame(steps(SwapOptions(), steady))
    remembered = change_per_frame(steps(SwapOptions(memory=StreamMemory()), steady))
    print(f"\nshading ratio change per frame: alone {alone:.4f}, with the stream's memory {remembered:.4f}")
    assert alone > 0.015 and remembered < 0.25 * alone
    dimmed = np.clip(target.astype(np.float32) * 0.7, 0, 255).astype(np.uint8)
    lights = [target] * 12 + [dimmed] * 12
    maps = steps(SwapOptions(memory=StreamMemory()), lights)
    drop = float(np.mean(maps[13] - maps[11]))
    assert abs(drop - np.log(0.7)) < 0.05  # the darker light is taken at once, not faded in
