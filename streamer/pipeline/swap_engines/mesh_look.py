"""What stands in front of one face, judged where its swap will look: the hands in front of it
(mesh_hands.py) and its occlusion mask (mesh_occlusion.py), on the target's face box at the swap's
working size. It needs the target's pixels and the face track's memory but nothing of the swap, so the
pipeline works it out in its track half (MeshEngine.plan, the worker thread) while the swap stage,
the busier of the two threads, swaps the previous frame.
"""

import time

import numpy as np
from numpy.typing import NDArray

from gpu_ops.working_resolution import shrink
from models.face import Frame
from streamer.pipeline.stage_timer import StageTimer
from streamer.pipeline.swap_engines.mesh_geometry import FaceGeometry
from streamer.pipeline.swap_engines.mesh_hands import FaceHands
from streamer.pipeline.swap_engines.mesh_memory import TrackMemory
from streamer.pipeline.swap_engines.mesh_occlusion import Occlusion, OcclusionThresholds, face_occlusion


def face_look(
    frame: Frame,
    geometry: FaceGeometry,
    thresholds: OcclusionThresholds,
    hands: FaceHands | None,
    look: TrackMemory | None,
    timer: StageTimer,
) -> Occlusion | None:
    """The occlusion of the face `geometry` places in `frame` (host or device), in the px of what is
    swapped; `look`: the face track's occlusion and hand memory (None: this frame alone). None for a
    box under 2 px. Records the "hands" and "occlusion" stage times."""
    x1, y1, x2, y2 = geometry.box
    if x2 - x1 < 2 or y2 - y1 < 2:
        return None
    outlines = hand_outlines(frame, geometry.mesh, hands, look, timer)
    region = frame[y1:y2, x1:x2]
    scale = 1.0
    if geometry.working is not None:
        scale = geometry.working[0] / (x2 - x1)
        region = shrink(region, geometry.working)
    corner = np.array([x1, y1], np.float32)
    started = time.perf_counter()
    occlusion = face_occlusion(
        region,
        geometry.region_mesh,
        (float(x1), float(y1)),
        scale,
        look.occlusion if look is not None else None,
        thresholds,
        [(outline - corner) * np.float32(scale) for outline in outlines],
    )
    timer.record("occlusion", time.perf_counter() - started)
    return occlusion


def hand_outlines(
    frame: Frame,
    mesh: NDArray[np.float32],
    hands: FaceHands | None,
    look: TrackMemory | None,
    timer: StageTimer,
) -> list[NDArray[np.float32]]:
    """Outlines (frame px) of the hands in front of the face with `mesh`, at the track's cadence."""
    if hands is None:
        return []
    started = time.perf_counter()
    low, high = mesh[:, :2].min(axis=0), mesh[:, :2].max(axis=0)
    box = np.concatenate([low, high]).astype(np.float32)
    outlines = hands.outlines(frame, box, look.hands if look is not None else None)
    timer.record("hands", time.perf_counter() - started)
    return outlines
