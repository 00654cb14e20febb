"""720p and 1080p close-ups: the mesh engine swaps a large face at its working resolution
(MeshConfig.working_px) and composites it back at full resolution; the pasted face stays as sharp,
the edge as invisible and the identity as moved as when the whole box is swapped at full size, and
an occluder in front of the face stays in front.

A close-up is a photo cut around its face so the face takes 35 % of the frame's width, as at a laptop
camera (docs/benchmarks.md); -s prints the measures.
"""

from pathlib import Path

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from bench.clients.frames import SOURCE_PHOTO
from bench.clients.occluders import cup, microphone, phone
from models.embedder import identity_distance
from models.face import Frame, TrackedFace
from streamer.pipeline.swap_engines.base import SwapOptions
from streamer.pipeline.swap_engines.mesh import MeshConfig, MeshEngine, paste_box
from tests.integration.test_mesh_identity import Models, Photo, embed, find_face, models, photos, source_image
from tests.integration.test_mesh_occluder_edge_motion import SEAM_PAIRS, seam_ratio
from tests.integration.test_mesh_quality import faces_of, load
from tests.integration.test_mesh_target_occlusion import (
    OCCLUDER_LEVELS,
    REST_SHARE,
    TARGETS,
    change,
    oval,
    rest_of_face,
)

__all__ = ["models", "photos"]  # the identity test's module fixtures, used here too

FACE_SHARE = 0.35
SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}


def close_up(image: Frame, box: NDArray[np.float32], size: tuple[int, int]) -> Frame:
    """`image` cut around `box` so the box is FACE_SHARE of the width, at `size`; the edges replicated
    where the cut runs past the photo."""
    width, height = size
    x1, y1, x2, y2 = (float(v) for v in box[:4])
    crop_width = (x2 - x1) / FACE_SHARE
    crop_height = crop_width * height / width
    left, top = (x1 + x2) / 2 - crop_width / 2, (y1 + y2) / 2 - crop_height / 2
    scale = width / crop_width
    matrix = np.array([[scale, 0, -left * scale], [0, scale, -top * scale]], np.float32)
    return np.ascontiguousarray(
        cv2.warpAffine(image, matrix, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    )


def high_frequency(image: Frame, mesh: NDArray[np.float32]) -> float:
    """RMS of the luma minus its 1-px Gaussian blur, inside the face hull shrunk by 15 % of its width
    (the swapped skin, eyes and mouth; not the blended edge)."""
    luma = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)
    detail = luma - cv2.GaussianBlur(luma, (0, 0), 1.0)
    hull = np.zeros(image.shape[:2], np.uint8)
    cv2.fillConvexPoly(hull, cv2.convexHull(mesh[:, :2].astype(np.int32)), 1)
    k = max(3, int(0.15 * float(mesh[:, 0].max() - mesh[:, 0].min())))
    inside = cv2.erode(hull, np.ones((k, k), np.uint8)).astype(bool)
    return float(np.sqrt((detail[inside] ** 2).mean()))


@pytest.fixture(scope="module")
def full_size(engine: MeshEngine) -> MeshEngine:
    """The engine as it was before the working resolution: every box swapped at full size."""
    return MeshEngine(engine.detector, engine.landmarker, MeshConfig(working_px=None))


def target_close_up(
    engine: MeshEngine, media_dir: Path, name: str, size: tuple[int, int]
) -> tuple[Frame, TrackedFace, NDArray[np.float32]]:
    """A close-up of the photo's face at `size`, its face found again there, and that face's mesh."""
    photo = load(media_dir, name, height=960)
    image = close_up(photo, faces_of(engine, photo)[0].box, size)
    face = faces_of(engine, image)[0]
    assert face.mesh is not None
    return image, face, face.mesh


def test_a_720p_close_up_is_swapped_at_the_working_resolution_and_stays_sharp(
    engine: MeshEngine, full_size: MeshEngine, media_dir: Path
) -> None:
    """The pasted face's high-frequency energy is within 10 % of the full-size swap's on every pair
    (measured 92-100 % on the seam pairs), and the working resolution was used (its resample stage ran)."""
    ratios = []
    for source_name, target_name in SEAM_PAIRS:
        image, face, mesh = target_close_up(engine, media_dir, target_name, SIZES["720p"])
        x1, y1, x2, y2 = paste_box(mesh, image.shape[1], image.shape[0])
        assert max(x2 - x1, y2 - y1) > (engine.config.working_px or 0) * 1.15
        photo = load(media_dir, source_name)
        engine.timer.reset()
        swapped = engine.swap(image, [face], engine.prepare_source(photo), SwapOptions())
        assert "resample" in engine.timer.totals()
        reference = full_size.swap(image, [face], full_size.prepare_source(photo), SwapOptions())
        ratios.append(high_frequency(swapped, mesh) / high_frequency(reference, mesh))
    print("\n720p close-up, pasted face's high frequencies vs full-size swap:", [round(r, 3) for r in ratios])
    assert min(ratios) >= 0.9


@pytest.mark.parametrize("size_name", list(SIZES))
def test_the_pasted_edge_stays_invisible_at_720p_and_1080p(
    engine: MeshEngine, full_size: MeshEngine, media_dir: Path, size_name: str
) -> None:
    """The edge gradient over the target's own around it (test_mesh_occluder_edge_motion.seam_ratio)
    stays within 10 % of the full-size swap's on every seam pair and 7 % on their mean (measured: 1-9 %,
    mean 4 % at 720p and 5.5 % at 1080p: the small swap's blend bands are coarser in frame pixels), and
    below the target's own gradients on most pairs. The close-ups are photos enlarged to a
    webcam's frame, softer than the target's own edges at 480p, so the full-size swap itself scores
    up to 1.06 here against 1.01 at 640x480: the comparison is with it, not with that bound."""
    drop = engine.config.source.forehead_drop
    ratios: list[float] = []
    full: list[float] = []
    for source_name, target_name in SEAM_PAIRS:
        image, face, mesh = target_close_up(engine, media_dir, target_name, SIZES[size_name])
        photo = load(media_dir, source_name)
        for configured, into in ((engine, ratios), (full_size, full)):
            swapped = configured.swap(image, [face], configured.prepare_source(photo), SwapOptions())
            into.append(seam_ratio(image, swapped, mesh, drop))
    print(
        f"\n{size_name} seam ratios: working {[round(r, 3) for r in ratios]}, full size {[round(r, 3) for r in full]}"
    )
    assert all(r <= f * 1.10 for r, f in zip(ratios, full))
    assert np.mean(ratios) <= np.mean(full) * 1.07
    assert sum(r <= 1.0 for r in ratios) >= 4


def mean_distance(
    embedding: NDArray[np.float32], embeddings: dict[str, NDArray[np.float32]], photos: list[Photo], of: Photo
) -> float:
    """Mean identity distance to the other photos of `of`'s person."""
    others = [p for p in photos if p.person == of.person and p is not of]
    return float(np.mean([identity_distance(embedding, embeddings[p.label]) for p in others]))


@pytest.mark.slow
@pytest.mark.parametrize("size_name", list(SIZES))
def test_identity_moves_in_720p_and_1080p_close_ups(
    models: Models, photos: list[Photo], full_size: MeshEngine, size_name: str
) -> None:
    """As test_mesh_identity, with every single-face target photo cut to a close-up at this size: the
    swapped face is nearer the source person's other photos than the target person's in about as many
    pairs as with the full-size swap and in >= 85 % of them. Measured with occlusion and the hand check
    on: 59 of 64 both ways at 720p, 57 (working) and 59 (full size) at 1080p; the misses are sources with
    a beard onto clean-shaven targets whose distances differ by under 0.01, so two pairs either way are
    within the noise, and the bar is the full-size swap's own rate on close-ups, not test_mesh_identity's."""
    embeddings = {p.label: embed(models, p.image, p.face) for p in photos}
    engines = {
        "working": models.engine,
        "full size": MeshEngine(models.detector, models.landmarker, full_size.config),
    }
    moved = dict.fromkeys(engines, 0)
    total = 0
    for target in (p for p in photos if p.label.endswith(":face")):
        image = close_up(target.image, target.face.box, SIZES[size_name])
        face = find_face(models, image, None)
        for source in (p for p in photos if p.person != target.person):
            total += 1
            for name, configured in engines.items():
                prepared = configured.prepare_source(source_image(source))
                embedding = embed(models, configured.swap(image, [face], prepared, SwapOptions()), face)
                to_source = mean_distance(embedding, embeddings, photos, source)
                moved[name] += to_source < mean_distance(embedding, embeddings, photos, target)
    print(f"\n{size_name} close-ups: identity moved in {moved} of {total} pairs")
    assert total >= 50
    assert moved["working"] >= moved["full size"] - 2 and moved["working"] / total >= 0.85


@pytest.mark.parametrize("size_name", list(SIZES))
@pytest.mark.parametrize("painter", [microphone, phone, cup], ids=["microphone", "phone", "cup"])
def test_an_occluder_in_front_of_a_close_up_stays_in_front(
    engine: MeshEngine, media_dir: Path, size_name: str, painter: object
) -> None:
    """test_mesh_target_occlusion's still check on 720p and 1080p close-ups, where the occlusion mask
    runs on the working-resolution region: the occluder within OCCLUDER_LEVELS of the input, the rest of
    the face keeping REST_SHARE of its change."""
    source = engine.prepare_source(load(media_dir, SOURCE_PHOTO))
    for target_name in TARGETS:
        target, face, mesh = target_close_up(engine, media_dir, target_name, SIZES[size_name])
        painted = painter(target, mesh)  # type: ignore[operator]
        inside = oval(mesh, target.shape)
        occluder = (painted != target).any(axis=2) & inside
        rest = rest_of_face(inside, occluder, target.shape)
        clean = engine.swap(target, [face], source, SwapOptions())
        swapped = engine.swap(painted, [face], source, SwapOptions())
        on_occluder = change(swapped, painted, occluder)
        share = change(swapped, painted, rest) / change(clean, target, rest)
        print(f"\n{size_name} {target_name} {painter.__name__}: occluder {on_occluder:.1f} levels, rest {share:.2f}")  # type: ignore[attr-defined]  # fmt: skip
        assert on_occluder <= OCCLUDER_LEVELS
        assert share >= REST_SHARE
