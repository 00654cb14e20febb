"""Mesh engine on synthetic faces: a real 468-point mesh (astronaut photo, stored) drawn as texture.

Fake detector/landmarker return that mesh, so no model file is needed. Checked: only the paste box
changes, target eyes and inner mouth stay, lips kept for a much wider mouth, turned sources are
mirrored or refused, missing faces are errors for the source and pass-through for the target.
"""

import dataclasses
from pathlib import Path
from typing import get_args

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.errors import InvalidInputError
from gpu_ops.masks import fill_polygons_cpu
from gpu_ops.mesh_warp import build_remap_cpu
from models import face_mesh_topology as topology
from models.detector import Detections
from models.face import Frame, TrackedFace
from models.landmarks import FaceLandmarks
from streamer.pipeline.swap_engines.base import NoFaceError, StreamMemory, SwapOptions
from streamer.pipeline.swap_engines.mesh import MeshConfig, MeshEngine, paste_box
from streamer.pipeline.swap_engines.mesh_source import (
    BLANK_TEXEL,
    MeshSourceConfig,
    TextureName,
    build_mesh_source,
    mouth_openness,
    yaw_degrees,
)

FRONTAL_MESH: NDArray[np.float32] = np.load(Path(__file__).parent / "data" / "face_mesh_468_frontal.npy")


def place(mesh: NDArray[np.float32], centre: tuple[float, float], height: float) -> NDArray[np.float32]:
    """The mesh scaled to a face `height` px tall (forehead to chin) and centred at `centre`."""
    current = np.linalg.norm(mesh[topology.FOREHEAD_TOP, :2] - mesh[topology.CHIN_BOTTOM, :2])
    middle = (mesh[:, :2].min(0) + mesh[:, :2].max(0)) / 2
    placed = mesh.copy()
    placed[:, :2] = (mesh[:, :2] - middle) * (height / current) + np.array(centre, np.float32)
    placed[:, 2] = mesh[:, 2] * (height / current)
    return placed.astype(np.float32)


def open_mouth(mesh: NDArray[np.float32], pixels: float) -> NDArray[np.float32]:
    """A jaw drop: every vertex below the inner-lip line (lower lip, chin) moved down."""
    opened = mesh.copy()
    lip_line = (mesh[topology.UPPER_INNER_LIP, 1] + mesh[topology.LOWER_INNER_LIP, 1]) / 2
    opened[mesh[:, 1] > lip_line, 1] += pixels
    return opened


def turn(mesh: NDArray[np.float32], degrees: float) -> NDArray[np.float32]:
    """The mesh rotated about the vertical axis through its centre (a head turn)."""
    angle = np.radians(degrees)
    centre = mesh.mean(axis=0)
    x, z = mesh[:, 0] - centre[0], mesh[:, 2] - centre[2]
    turned = mesh.copy()
    turned[:, 0] = centre[0] + x * np.cos(angle) + z * np.sin(angle)
    turned[:, 2] = centre[2] - x * np.sin(angle) + z * np.cos(angle)
    return turned


def painted_face(size: tuple[int, int], mesh: NDArray[np.float32], seed: int) -> Frame:
    """A noisy background with every mesh triangle filled in its own colour (a fully textured face)."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    colours = rng.integers(60, 230, (len(topology.ALL_TRIANGLES), 3))
    for triangle, colour in zip(topology.ALL_TRIANGLES, colours, strict=True):
        cv2.fillConvexPoly(image, np.round(mesh[triangle, :2]).astype(np.int32), colour.tolist())
    return image


class FakeDetector:
    def __init__(self, meshes: list[NDArray[np.float32]]) -> None:
        self.meshes = meshes

    def detect(self, frame: Frame) -> Detections:
        if not self.meshes:
            return Detections.empty()
        boxes = np.array([[*m[:, :2].min(0), *m[:, :2].max(0)] for m in self.meshes], np.float32)
        points = np.stack([m[[33, 263, 1, 61, 291], :2] for m in self.meshes]).astype(np.float32)
        return Detections(boxes, np.ones(len(self.meshes), np.float32), points)


class FakeLandmarker:
    def __init__(self, meshes: list[NDArray[np.float32]], presence: float = 1.0) -> None:
        self.meshes = meshes
        self.presence = presence

    def detect(
        self, frame: Frame, landmarks_5: NDArray[np.float32], boxes: NDArray[np.float32]
    ) -> FaceLandmarks:
        index = int(np.argmin([abs(m[:, 0].min() - boxes[0, 0]) for m in self.meshes]))
        return FaceLandmarks(self.meshes[index][None].copy(), np.array([self.presence], np.float32))


def make_engine(
    source_mesh: NDArray[np.float32],
    config: MeshConfig | None = None,
    presence: float = 1.0,
    occlusion: bool = False,
) -> MeshEngine:
    """The engine on the painted faces. Their random triangles are no skin, so the target occlusion mask
    (checked on real photos: tests/integration/test_mesh_target_occlusion.py) would call every painted
    target covered; it is off unless asked for."""
    config = config or MeshConfig()
    if not occlusion:
        config = dataclasses.replace(config, occlusion=None)
    return MeshEngine(FakeDetector([source_mesh]), FakeLandmarker([source_mesh], presence), config)  # type: ignore[arg-type]


def tracked(mesh: NDArray[np.float32], track_id: int = 1) -> TrackedFace:
    box = np.array([*mesh[:, :2].min(0), *mesh[:, :2].max(0)], np.float32)
    return TrackedFace(track_id, box, 1.0, mesh[[33, 263, 1, 61, 291], :2].astype(np.float32), mesh)


@pytest.fixture
def source_mesh() -> NDArray[np.float32]:
    return place(FRONTAL_MESH, (160, 170), 200)


@pytest.fixture
def source_image(source_mesh: NDArray[np.float32]) -> Frame:
    return painted_face((320, 320), source_mesh, seed=1)


def test_a_target_covered_all_over_keeps_its_own_pixels(
    source_mesh: NDArray[np.float32], source_image: Frame
) -> None:
    """A face whose oval is all unlike skin (the painted triangles: as if a hand covered it) is not
    swapped at all with occlusion on, so no eyes or lips are drawn on what covers it; off, it is."""
    engine = make_engine(source_mesh, occlusion=True)
    heard: list[None] = []
    engine.add_occlusion_listener(lambda: heard.append(None))  # /metrics counts through this
    source = engine.prepare_source(source_image)
    target_mesh = place(FRONTAL_MESH, (300, 230), 180)
    frame = painted_face((640, 480), target_mesh, seed=2)
    swapped = engine.swap(frame, [tracked(target_mesh)], source, SwapOptions())
    assert engine.last_occlusion is not None and engine.last_occlusion.cover > 0.65
    assert engine.last_occlusion.fade == 0.0 and np.array_equal(swapped, frame)
    assert engine.occluded_faces == 1 and len(heard) == 1
    pasted = engine.swap(frame, [tracked(target_mesh)], source, SwapOptions(occlusion=False))
    assert not np.array_equal(pasted, frame)


def test_only_pixels_inside_the_paste_box_change(
    source_mesh: NDArray[np.float32], source_image: Frame
) -> None:
    engine = make_engine(source_mesh)
    source = engine.prepare_source(source_image)
    target_mesh = place(FRONTAL_MESH, (300, 230), 180)
    frame = painted_face((640, 480), target_mesh, seed=2)
    swapped = engine.swap(frame, [tracked(target_mesh)], source, SwapOptions())
    x1, y1, x2, y2 = paste_box(target_mesh, 640, 480)
    outside = np.ones((480, 640), bool)
    outside[y1:y2, x1:x2] = False
    np.testing.assert_array_equal(swapped[outside], frame[outside])
    assert (swapped[y1:y2, x1:x2] != frame[y1:y2, x1:x2]).any(axis=2).mean() > 0.3
    assert swapped is not frame and swapped.shape == frame.shape


def test_target_eyes_and_inner_mouth_are_kept_only_with_mouth_mask(
    source_mesh: NDArray[np.float32], source_image: Frame
) -> None:
    engine = make_engine(source_mesh)
    source = engine.prepare_source(source_image)
    target_mesh = open_mouth(place(FRONTAL_MESH, (320, 240), 220), 25.0)
    frame = painted_face((640, 480), target_mesh, seed=3)
    size = (640, 480)
    inner_mouth = fill_polygons_cpu(size, [target_mesh[list(topology.LIPS_INNER), :2]]) > 0
    eye_region = fill_polygons_cpu(
        size, [target_mesh[list(topology.RIGHT_EYE), :2], target_mesh[list(topology.LEFT_EYE), :2]]
    )
    # the eye opening fades from the source's lids to the target's eye over ~1.5 % of the face height
    # (3.3 px here) + 1 px bilinear reach: deeper than 5 px inside the lid line is the target's own
    eyes = cv2.distanceTransform(eye_region, cv2.DIST_L2, cv2.DIST_MASK_PRECISE) >= 5.0
    assert inner_mouth.sum() > 500 and eyes.sum() > 100

    kept = engine.swap(frame, [tracked(target_mesh)], source, SwapOptions(mouth_mask=True))
    np.testing.assert_array_equal(kept[inner_mouth], frame[inner_mouth])
    np.testing.assert_array_equal(kept[eyes], frame[eyes])

    replaced = engine.swap(frame, [tracked(target_mesh)], source, SwapOptions(mouth_mask=False))
    assert (replaced[inner_mouth] != frame[inner_mouth]).any(axis=1).mean() > 0.5
    assert (replaced[eyes] != frame[eyes]).any(axis=1).mean() > 0.5


def test_target_lips_are_kept_when_its_mouth_is_much_wider_open(source_mesh: NDArray[np.float32]) -> None:
    engine = make_engine(source_mesh)
    closed = place(FRONTAL_MESH, (320, 240), 220)
    wide = open_mouth(closed, 40.0)
    source = build_mesh_source(painted_face((320, 320), source_mesh, 4), source_mesh, MeshSourceConfig())
    assert mouth_openness(wide) > mouth_openness(closed) + 0.3
    assert engine.lips_weight(wide, source) == 1.0
    assert engine.lips_weight(closed, source) == 0.0
    assert make_engine(source_mesh, MeshConfig(keep_target_lips=False)).lips_weight(wide, source) == 0.0


def test_turned_source_is_mirrored_and_a_profile_is_refused(source_mesh: NDArray[np.float32]) -> None:
    image = painted_face((320, 320), source_mesh, 5)
    frontal = build_mesh_source(image, source_mesh, MeshSourceConfig())
    assert abs(frontal.yaw_degrees) < 10 and frontal.mirrored_triangles == 0
    turned_mesh = turn(source_mesh, 25.0)
    assert abs(yaw_degrees(turned_mesh)) == pytest.approx(25.0 + yaw_degrees(source_mesh), abs=6.0)
    turned = build_mesh_source(image, turned_mesh, MeshSourceConfig())
    assert turned.mirrored_triangles > 10
    unculled = build_mesh_source(image, turned_mesh, MeshSourceConfig(cull_back_faces=False))
    assert unculled.mirrored_triangles == 0
    changed_rows = (turned.src_triangles != unculled.src_triangles).any(axis=(1, 2)).sum()
    assert changed_rows == turned.mirrored_triangles
    with pytest.raises(NoFaceError, match="turned"):
        build_mesh_source(image, turn(source_mesh, 40.0), MeshSourceConfig())


def test_source_without_a_face_or_mesh_is_an_error(
    source_mesh: NDArray[np.float32], source_image: Frame
) -> None:
    with pytest.raises(NoFaceError):
        MeshEngine(FakeDetector([]), FakeLandmarker([source_mesh])).prepare_source(source_image)  # type: ignore[arg-type]
    with pytest.raises(NoFaceError):
        make_engine(source_mesh, presence=0.1).prepare_source(source_image)


def test_faces_without_mesh_pass_through_and_wrong_source_is_rejected(
    source_mesh: NDArray[np.float32], source_image: Frame
) -> None:
    engine = make_engine(source_mesh)
    source = engine.prepare_source(source_image)
    frame = painted_face((200, 200), place(FRONTAL_MESH, (100, 100), 90), 6)
    face = TrackedFace(1, np.array([10, 10, 190, 190], np.float32), 1.0, np.zeros((5, 2), np.float32), None)
    np.testing.assert_array_equal(engine.swap(frame, [face], source, SwapOptions()), frame)
    with pytest.raises(InvalidInputError):
        engine.swap(frame, [face], object(), SwapOptions())  # type: ignore[arg-type]


def test_face_partly_outside_the_frame_is_clipped(
    source_mesh: NDArray[np.float32], source_image: Frame
) -> None:
    engine = make_engine(source_mesh)
    source = engine.prepare_source(source_image)
    target_mesh = place(FRONTAL_MESH, (20, 30), 200)
    frame = painted_face((160, 120), target_mesh, 7)
    swapped = engine.swap(frame, [tracked(target_mesh)], source, SwapOptions())
    x1, y1, x2, y2 = paste_box(target_mesh, 160, 120)
    assert (x1, y1) == (0, 0) and x2 <= 160 and y2 <= 120
    assert (swapped != frame).any()


def test_shading_follows_a_darker_target(source_mesh: NDArray[np.float32], source_image: Frame) -> None:
    target_mesh = place(FRONTAL_MESH, (160, 160), 200)
    frame = (painted_face((320, 320), target_mesh, 8) // 3).astype(np.uint8)  # a dim room
    interior = fill_polygons_cpu((320, 320), [target_mesh[[50, 280, 425, 205], :2]]) > 0  # cheeks/nose band
    means = {}
    for shading in ("none", "low_frequency", "lab"):
        engine = make_engine(source_mesh, MeshConfig(shading=shading))
        swapped = engine.swap(
            frame, [tracked(target_mesh)], engine.prepare_source(source_image), SwapOptions()
        )
        means[shading] = float(swapped[interior].mean())
    target_mean = float(frame[interior].mean())
    assert abs(means["low_frequency"] - target_mean) < 0.3 * abs(means["none"] - target_mean)
    assert abs(means["lab"] - target_mean) < 0.5 * abs(means["none"] - target_mean)


def jittery_frames(target_mesh: NDArray[np.float32], count: int, seed: int) -> list[NDArray[np.float32]]:
    """The meshes a tracker reports for a nodding face: the face box 4 % taller and shorter by turns (its
    coarse shading grid has 4 or 5 rows by turns), the mouth opening and closing, 1 px landmark noise."""
    rng = np.random.default_rng(seed)
    meshes = []
    for index in range(count):
        mesh = open_mouth(target_mesh, 12.0) if index % 4 >= 2 else target_mesh.copy()
        middle = float(mesh[:, 1].mean())
        mesh[:, 1] = middle + (mesh[:, 1] - middle) * (1.04 if index % 2 else 0.96)
        mesh[:, :2] += rng.normal(0, 1.0, (len(mesh), 2)).astype(np.float32)
        meshes.append(mesh)
    return meshes


def test_stream_memory_keeps_the_skin_tone_from_pumping(source_mesh: NDArray[np.float32]) -> None:
    """A plain skin-coloured source on a target of many colours: what moves the swapped cheeks' tone from
    frame to frame is the measured shading alone (the warp of a plain texture changes nothing)."""
    engine = make_engine(source_mesh)
    plain = np.full((320, 320, 3), (200, 150, 125), np.uint8)
    source = build_mesh_source(plain, source_mesh, MeshSourceConfig(skin_mask=False))
    target_mesh = place(FRONTAL_MESH, (320, 240), 220)
    frame = painted_face((640, 480), target_mesh, seed=9)
    interior = fill_polygons_cpu((640, 480), [target_mesh[[50, 280, 425, 205], :2]]) > 0  # cheeks and nose

    def tone_changes(options: SwapOptions) -> float:
        tones = [
            engine.swap(frame, [tracked(mesh)], source, options)[interior].astype(np.float64).mean(axis=0)
            for mesh in jittery_frames(target_mesh, 24, seed=1)
        ]
        return float(np.abs(np.diff(np.stack(tones), axis=0)).mean())

    alone = tone_changes(SwapOptions())
    remembered = tone_changes(SwapOptions(memory=StreamMemory()))
    assert alone > 0.15  # the statistics do move with the nod and the mouth...
    assert remembered < 0.5 * alone  # ...and the stream's memory holds the tone


def test_a_new_track_or_source_starts_from_its_own_first_frame(
    source_mesh: NDArray[np.float32], source_image: Frame
) -> None:
    engine = make_engine(source_mesh)
    source = engine.prepare_source(source_image)
    target_mesh = place(FRONTAL_MESH, (320, 240), 220)
    frame = painted_face((640, 480), target_mesh, seed=10)
    memory = StreamMemory()
    options = SwapOptions(memory=memory)
    for mesh in jittery_frames(target_mesh, 6, seed=2):
        engine.swap(frame, [tracked(mesh)], source, options)
    stateless = engine.swap(frame, [tracked(target_mesh)], source, SwapOptions())
    remembered = engine.swap(frame, [tracked(target_mesh)], source, options)
    assert (remembered != stateless).any()  # track 1 carries its history
    np.testing.assert_array_equal(
        engine.swap(frame, [tracked(target_mesh, track_id=2)], source, options), stateless
    )
    other_source = engine.prepare_source(painted_face((320, 320), source_mesh, seed=11))
    np.testing.assert_array_equal(
        engine.swap(frame, [tracked(target_mesh)], other_source, options),
        engine.swap(frame, [tracked(target_mesh)], other_source, SwapOptions()),
    )


@pytest.mark.gpu
def test_swap_of_a_cupy_frame_stays_on_the_device_and_matches_the_cpu(
    source_mesh: NDArray[np.float32], source_image: Frame
) -> None:
    from gpu_ops.backend import cupy_available

    usable, reason = cupy_available()
    if not usable:
        pytest.skip(reason)
    import cupy

    engine = make_engine(source_mesh, MeshConfig(keep_target_lips=True))
    source = engine.prepare_source(source_image)
    target_mesh = open_mouth(place(FRONTAL_MESH, (320, 240), 220), 25.0)
    frame = painted_face((640, 480), target_mesh, seed=5)
    options = SwapOptions(mouth_mask=True)
    expected = engine.swap(frame, [tracked(target_mesh)], source, options)
    result = engine.swap(cupy.asarray(frame), [tracked(target_mesh)], source, options)
    assert isinstance(result, cupy.ndarray)
    # warp and masks are exact; the shading ratio's float sums may round a level apart
    assert np.abs(cupy.asnumpy(result).astype(int) - expected).max() <= 1


@pytest.mark.parametrize("face_height", [180, 420])  # 420: swapped at the working resolution
def test_a_planned_swap_is_the_swap_worked_out_alone(
    source_mesh: NDArray[np.float32], source_image: Frame, face_height: int
) -> None:
    """The geometry the pipeline's track half works out (`plan`: box, working size, remap field) gives
    the same bytes as the swap working it out itself; a plan made for another mesh is not used."""
    engine = make_engine(source_mesh)
    source = engine.prepare_source(source_image)
    size = (1280, 720) if face_height > 300 else (640, 480)
    target_mesh = place(FRONTAL_MESH, (size[0] / 2, size[1] / 2), face_height)
    other_mesh = place(FRONTAL_MESH, (size[0] / 2 + 40, size[1] / 2), face_height * 0.8)
    frame = painted_face(size, target_mesh, seed=5)
    faces = [tracked(target_mesh)]
    plans = engine.plan(frame, faces, source)
    assert plans[0] is not None and plans[0].field is not None
    assert (plans[0].working is not None) == (face_height > 300)
    alone = engine.swap(frame, faces, source, SwapOptions())
    planned = engine.swap(frame, faces, source, SwapOptions(plans=plans))
    np.testing.assert_array_equal(planned, alone)
    stale = engine.plan(frame, [tracked(other_mesh)], source)
    np.testing.assert_array_equal(engine.swap(frame, faces, source, SwapOptions(plans=stale)), alone)
    assert engine.plan(frame, [TrackedFace(2, faces[0].box, 1.0, faces[0].landmarks_5, None)], source) == [
        None
    ]


def test_uncovered_pixels_sample_the_blank_texel_and_swap_as_if_off_the_texture(
    source_mesh: NDArray[np.float32], source_image: Frame
) -> None:
    """The planned field points pixels no triangle covers at `BLANK_TEXEL`, 0 in every texture of the
    source (OpenCV's fast path), so the swap's bytes are those of a field pointing off the texture."""
    engine = make_engine(source_mesh)
    source = engine.prepare_source(source_image)
    for name in get_args(TextureName):
        assert not getattr(source, name)[BLANK_TEXEL].any(), name
    target_mesh = place(FRONTAL_MESH, (320, 240), 200)
    frame = painted_face((640, 480), target_mesh, seed=5)
    faces = [tracked(target_mesh)]
    plan = engine.plan(frame, faces, source)[0]
    assert plan is not None and plan.field is not None
    x1, y1, x2, y2 = plan.box
    triangles = plan.region_mesh[topology.ALL_TRIANGLES, :2]
    off_texture = build_remap_cpu(triangles, source.src_triangles, plan.working or (x2 - x1, y2 - y1))
    uncovered = off_texture[0] == -1
    assert uncovered.mean() > 0.1
    assert (plan.field[0][uncovered] == BLANK_TEXEL[1]).all() and (
        plan.field[1][uncovered] == BLANK_TEXEL[0]
    ).all()
    np.testing.assert_array_equal(plan.field[0][~uncovered], off_texture[0][~uncovered])
    as_before = dataclasses.replace(plan, field=off_texture)
    np.testing.assert_array_equal(
        engine.swap(frame, faces, source, SwapOptions(plans=[plan])),
        engine.swap(frame, faces, source, SwapOptions(plans=[as_before])),
    )


def test_a_strained_engine_swaps_a_480p_face_at_the_smaller_working_size(
    source_mesh: NDArray[np.float32], source_image: Frame
) -> None:
    """While the daemon says it is short of CPU (`set_strain`), a 640x480 face's box (~260 px, swapped
    as it is otherwise) is swapped at `strained_working_px`; only the box's pixels change, and the swap
    is the same face (close to the full-size swap: the working size blurs only fine detail)."""
    engine = make_engine(source_mesh)
    source = engine.prepare_source(source_image)
    target_mesh = place(FRONTAL_MESH, (320, 240), 260)
    frame = painted_face((640, 480), target_mesh, seed=5)
    faces = [tracked(target_mesh)]
    relaxed_plan = engine.plan(frame, faces, source)[0]
    relaxed = engine.swap(frame, faces, source, SwapOptions())
    strained_now = True
    engine.set_strain(lambda: strained_now)
    strained_plan = engine.plan(frame, faces, source)[0]
    assert relaxed_plan is not None and relaxed_plan.working is None
    assert strained_plan is not None and strained_plan.working is not None
    assert max(strained_plan.working) == MeshConfig().strained_working_px
    strained = engine.swap(frame, faces, source, SwapOptions())
    x1, y1, x2, y2 = strained_plan.box
    outside = np.ones(frame.shape[:2], bool)
    outside[y1:y2, x1:x2] = False
    np.testing.assert_array_equal(strained[outside], frame[outside])
    changed = np.abs(relaxed.astype(int) - frame).sum(axis=2) > 0
    assert np.abs(strained.astype(int) - relaxed)[changed].mean() < 0.25 * np.abs(relaxed.astype(int) - frame)[changed].mean()  # fmt: skip
    strained_now = False
    assert engine.plan(frame, faces, source)[0].working is None  # type: ignore[union-attr]
