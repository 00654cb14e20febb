"""Issue 18: what stands in front of a target face stays in front (a microphone, a phone, a cup), in still
swaps and through the live pipeline with an occluder sliding across a moving face; the rest of the face is
still swapped; a glasses frame stays too, its rims over the brows included. Each check also swaps with the
occlusion switch off and shows that the occluder is painted over there (-s prints the numbers)."""

from pathlib import Path

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from bench.clients.frames import SOURCE_PHOTO, TARGET_PHOTO, panning_face_frames
from bench.clients.occluders import cup, glasses_frame, hand, microphone, phone, side_light
from gpu_ops.masks import fill_polygons_cpu
from models import face_mesh_topology as topology
from models.face import Frame
from streamer.pipeline.frame_pipeline import FrameJob, FramePipeline
from streamer.pipeline.image_input import read_image_file
from streamer.pipeline.pipeline_settings import PipelineConfig, SwapSettings
from streamer.pipeline.swap_engines.base import SwapOptions
from streamer.pipeline.swap_engines.mesh import MeshEngine
from tests.integration.test_mesh_quality import faces_of, load

OCCLUDER_LEVELS = 12.0  # mean absolute change of the occluder's pixels, per channel
REST_SHARE = 0.6  # of the change the rest of the face gets without the occluder
EYES_IN_GLASSES = 0.7  # of the change the eye openings get without glasses (measured 0.89-1.11)
TARGETS = ("fr_obama.jpg", "skimage_astronaut.png", "fr_biden.jpg")


def oval(mesh: NDArray[np.float32], shape: tuple[int, ...]) -> NDArray[np.bool_]:
    return fill_polygons_cpu((shape[1], shape[0]), [mesh[list(topology.FACE_OVAL), :2]]) > 0


def change(after: Frame, before: Frame, where: NDArray[np.bool_]) -> float:
    return float(np.abs(after.astype(np.float64) - before)[where].mean())


def rest_of_face(face: NDArray[np.bool_], occluder: NDArray[np.bool_], shape: tuple[int, ...]) -> NDArray[np.bool_]:  # fmt: skip
    """The face away from the occluder (its grown, softened rim excluded)."""
    reach = max(3, round(0.04 * np.sqrt(face.sum())) | 1)
    grown = cv2.dilate(occluder.astype(np.uint8), np.ones((reach, reach), np.uint8)) > 0
    return face & ~grown


@pytest.mark.parametrize("target_name", TARGETS)
@pytest.mark.parametrize(
    "painter", [microphone, phone, cup, hand], ids=["microphone", "phone", "cup", "skin-toned hand"]
)
def test_an_occluder_in_front_of_the_target_stays_and_the_rest_is_swapped(
    engine: MeshEngine, media_dir: Path, target_name: str, painter: object
) -> None:
    target = load(media_dir, target_name)
    face = faces_of(engine, target)[0]
    assert face.mesh is not None
    source = engine.prepare_source(load(media_dir, SOURCE_PHOTO))
    painted = painter(target, face.mesh)  # type: ignore[operator]
    inside = oval(face.mesh, target.shape)
    occluder = (painted != target).any(axis=2) & inside
    rest = rest_of_face(inside, occluder, target.shape)
    assert occluder.sum() > 0.03 * inside.sum() and rest.sum() > 0.4 * inside.sum()
    clean = engine.swap(target, [face], source, SwapOptions())
    swapped = engine.swap(painted, [face], source, SwapOptions())
    pasted_over = engine.swap(painted, [face], source, SwapOptions(occlusion=False))
    on_occluder, off_occluder = change(swapped, painted, occluder), change(pasted_over, painted, occluder)
    share = change(swapped, painted, rest) / change(clean, target, rest)
    print(f"\n{target_name} {painter.__name__}: occluder {on_occluder:.1f} levels (off {off_occluder:.1f}), rest {share:.2f}")  # type: ignore[attr-defined]  # fmt: skip
    assert on_occluder <= OCCLUDER_LEVELS
    assert share >= REST_SHARE
    # without the mask the source is drawn across it (a skin-toned hand changes less: the source's skin)
    assert off_occluder > (1 if painter is hand else 2) * OCCLUDER_LEVELS


@pytest.mark.parametrize("target_name", TARGETS)
def test_a_glasses_frame_stays_and_the_eyes_are_still_swapped(
    engine: MeshEngine, media_dir: Path, target_name: str
) -> None:
    target = load(media_dir, target_name)
    face = faces_of(engine, target)[0]
    assert face.mesh is not None
    source = engine.prepare_source(load(media_dir, SOURCE_PHOTO))
    painted = glasses_frame(target, face.mesh)
    inside = oval(face.mesh, target.shape)
    frame = (painted != target).any(axis=2) & inside
    rest = rest_of_face(inside, frame, target.shape)
    eyes = (
        fill_polygons_cpu(
            (target.shape[1], target.shape[0]),
            [face.mesh[list(eye), :2] for eye in (topology.RIGHT_EYE, topology.LEFT_EYE)],
        )
        > 0
    )
    eyes &= ~frame
    assert frame.sum() > 0.1 * inside.sum()
    clean = engine.swap(target, [face], source, SwapOptions())
    swapped = engine.swap(painted, [face], source, SwapOptions())
    pasted_over = engine.swap(painted, [face], source, SwapOptions(occlusion=False))
    on_frame, off_frame = change(swapped, painted, frame), change(pasted_over, painted, frame)
    share = change(swapped, painted, rest) / change(clean, target, rest)
    eye_share = change(swapped, painted, eyes) / change(clean, target, eyes)
    print(f"\n{target_name} glasses frame: {on_frame:.1f} levels (off {off_frame:.1f}), rest {share:.2f}, eyes {eye_share:.2f}")  # fmt: skip
    assert on_frame <= OCCLUDER_LEVELS
    assert share >= REST_SHARE  # the rest of the face, inside the rims too, is still the source's
    # the eyes inside the lenses are the source's (a rim bridged nothing: 0.07-0.85 when its closing
    # filled the lens and took the eye along)
    assert eye_share >= EYES_IN_GLASSES
    assert off_frame > 3 * OCCLUDER_LEVELS


def sliding_bar(frame: Frame, mesh: NDArray[np.float32], step: int, steps: int) -> Frame:
    """A dark bar (a phone's edge, a microphone's handle) a quarter of the face wide, sliding from
    past the face's left edge to past its right edge over `steps` frames."""
    height = float(np.linalg.norm(mesh[10, :2] - mesh[152, :2]))
    left, right = float(mesh[:, 0].min()), float(mesh[:, 0].max())
    width = 0.25 * height
    x = left - width + (right - left + width) * step / max(steps - 1, 1)
    painted = frame.copy()
    top = int(mesh[10, 1] + 0.25 * height)
    cv2.rectangle(painted, (int(x), top), (int(x + width), int(top + 0.9 * height)), (30, 32, 38), -1)
    return painted


def sliding_hand(frame: Frame, mesh: NDArray[np.float32], step: int, steps: int) -> Frame:
    """The skin-toned hand (bench.clients.occluders.hand) raised from below the chin to the subject's
    right jaw over the first third of the `steps` frames, then sliding across the mouth to the left
    cheek."""
    rise = steps // 3
    if step < rise:
        return hand(frame, mesh, shift=(-0.15, 0.6 * (1.0 - step / rise)))
    return hand(frame, mesh, shift=(-0.15 + 0.45 * (step - rise) / max(steps - 1 - rise, 1), 0.0))


@pytest.mark.parametrize("slider", [sliding_bar, sliding_hand], ids=["dark bar", "skin-toned hand"])
def test_a_sliding_occluder_through_the_live_pipeline(
    models_dir: Path, media_dir: Path, slider: object
) -> None:
    """60 panning frames through FramePipeline (tracker, stream memory): the occluder's pixels within 12
    levels, the rest of the face at least 60 % as changed as the same frames without it, and the
    mask steady (its cover changes from frame to frame as the occluder's does)."""
    pipeline = FramePipeline.load(
        models_dir, PipelineConfig(execution_provider="cpu", engine="mesh", intra_op_threads=1)
    )
    engine = pipeline.engines["mesh"]
    assert isinstance(engine, MeshEngine)
    settings = SwapSettings(engine="mesh")
    source = pipeline.prepare_source(read_image_file(media_dir / SOURCE_PHOTO), settings)
    frames = panning_face_frames(read_image_file(media_dir / TARGET_PHOTO), 640, 480, 60)
    clean_stream, occluded_stream = pipeline.new_stream(), pipeline.new_stream()
    on_bar, shares, covers, bar_covers = [], [], [], []
    for step, frame in enumerate(frames):
        mesh = faces_of(engine, frame)[0].mesh
        assert mesh is not None
        painted = slider(frame, mesh, step, len(frames))  # type: ignore[operator]
        clean = pipeline.process(FrameJob(frame, clean_stream, source, settings))
        swapped = pipeline.process(FrameJob(painted, occluded_stream, source, settings))
        assert engine.last_occlusion is not None
        covers.append(engine.last_occlusion.cover)
        inside = oval(mesh, frame.shape)
        bar = (painted != frame).any(axis=2) & inside
        rest = rest_of_face(inside, bar, frame.shape)
        bar_covers.append(bar.sum() / inside.sum())
        shares.append(change(swapped, painted, rest) / change(clean, frame, rest))
        if bar.sum() > 0.02 * inside.sum():
            on_bar.append(change(swapped, painted, bar))
    print(
        f"\nbar: levels {np.round(on_bar, 1)}; rest shares {np.round(shares, 2)}; covers {np.round(covers, 2)}"
    )
    assert len(on_bar) >= 30 and max(on_bar) <= OCCLUDER_LEVELS
    assert min(shares) >= REST_SHARE
    # frame to frame the mask changes as the bar does (it enters, crosses the features, leaves), no more
    excess = np.abs(np.diff(covers) - np.diff(bar_covers))
    print(f"mask cover change beyond the bar's: mean {excess.mean():.3f}, max {excess.max():.3f}")
    # (a feature the bar reaches, an eye or the nose, joins in one frame: measured 0.10-0.11 at most)
    assert excess.mean() <= 0.03 and excess.max() <= 0.15


@pytest.mark.parametrize(
    ("target_name", "painter"),
    [
        ("fr_biden.jpg", cup),  # full size: a cheek beside the cup reached presence 0.75
        ("skimage_astronaut.png", phone),  # a brow beside the phone reached 0.89
        ("fr_obama.jpg", None),  # arms crossed below the face: real hands, not in front of it
        ("fr_biden2.jpg", None),
        ("fr_alex_lacamoire.png", None),
    ],
)
def test_no_hand_is_found_on_a_face_without_one(
    engine: MeshEngine, media_dir: Path, target_name: str, painter: object
) -> None:
    """The hand check on still images at full size, clean and with the painted non-hand occluders: no
    hand outline reaches into the face's oval."""
    assert engine.hands is not None
    target = read_image_file(media_dir / target_name)
    for face in faces_of(engine, target):
        assert face.mesh is not None
        image = target if painter is None else painter(target, face.mesh)  # type: ignore[operator]
        box = np.concatenate([face.mesh[:, :2].min(axis=0), face.mesh[:, :2].max(axis=0)])
        outlines = engine.hands.outlines(image, box, None)
        inside = oval(face.mesh, image.shape)
        reached = fill_polygons_cpu((image.shape[1], image.shape[0]), outlines) > 0 if outlines else None
        assert reached is None or not (reached & inside).any(), f"a hand on {target_name}"


# of the oval a side light may still be taken for (the moustache's shadowed end, a beard's edge: 0.02-0.06
# measured; before the light fit 0.09-0.16, and 0.30 on the side-lit photo)
SIDE_LIT_COVER = 0.07


@pytest.mark.parametrize("target_name", ["fr_alex_lacamoire1.jpg", "fr_alex_lacamoire2.jpg", "fr_obama.jpg"])
@pytest.mark.parametrize("shadow_on_left", [True, False], ids=["shadow left", "shadow right"])
def test_the_shadowed_side_of_a_side_lit_face_is_no_occluder(
    engine: MeshEngine, media_dir: Path, target_name: str, shadow_on_left: bool
) -> None:
    """A lamp beside the face (brightness falling to 30 % across it): the shadowed cheek, and the beard
    and moustache in its shadow, are still swapped (face_light.py); one photo lit so from the start too."""
    target = load(media_dir, target_name)
    mesh = faces_of(engine, target)[0].mesh
    assert mesh is not None
    lit = side_light(target, mesh, shadow_on_left)
    face = faces_of(engine, lit)[0]
    engine.swap(lit, [face], engine.prepare_source(load(media_dir, SOURCE_PHOTO)), SwapOptions())
    assert engine.last_occlusion is not None
    print(f"\n{target_name} side-lit: cover {engine.last_occlusion.cover:.3f}")
    assert engine.last_occlusion.cover <= SIDE_LIT_COVER


def test_a_photo_lit_from_the_side_keeps_its_shadowed_cheek_swapped(
    engine: MeshEngine, media_dir: Path
) -> None:
    target = load(media_dir, "fr_alex_lacamoire.png")  # a lamp on the subject's left: the right cheek dark
    face = faces_of(engine, target)[0]
    engine.swap(target, [face], engine.prepare_source(load(media_dir, SOURCE_PHOTO)), SwapOptions())
    assert engine.last_occlusion is not None
    print(f"\nfr_alex_lacamoire.png: cover {engine.last_occlusion.cover:.3f}")
    assert engine.last_occlusion.cover <= SIDE_LIT_COVER


@pytest.mark.parametrize("target_name", TARGETS)
@pytest.mark.parametrize(
    ("painter", "shadow_on_left"), [(microphone, True), (phone, False)], ids=["microphone", "phone"]
)
def test_a_dark_occluder_in_the_shadow_of_a_side_light_still_stays(
    engine: MeshEngine, media_dir: Path, target_name: str, painter: object, shadow_on_left: bool
) -> None:
    """The light fit explains a shadow, not what is held in it: a microphone or phone on the shadowed
    side keeps the target's pixels."""
    target = load(media_dir, target_name)
    mesh = faces_of(engine, target)[0].mesh
    assert mesh is not None
    lit = side_light(target, mesh, shadow_on_left)
    face = faces_of(engine, lit)[0]
    assert face.mesh is not None
    painted = painter(lit, face.mesh)  # type: ignore[operator]
    occluder = (painted != lit).any(axis=2) & oval(face.mesh, lit.shape)
    swapped = engine.swap(
        painted, [face], engine.prepare_source(load(media_dir, SOURCE_PHOTO)), SwapOptions()
    )
    on_occluder = change(swapped, painted, occluder)
    print(f"\n{target_name} {painter.__name__} in shadow: occluder {on_occluder:.1f} levels")  # type: ignore[attr-defined]  # fmt: skip
    assert on_occluder <= OCCLUDER_LEVELS
