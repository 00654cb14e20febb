"""The occlusion mask over a face track's frames (issue 18): steady on an unchanging face, the track's skin
model never learnt from a covered frame, and a face covered over most of its oval faded out over a few
frames (not at once) until its own pixels show, eyes and lips not drawn on what covers it."""

import itertools
from pathlib import Path

import cv2
import numpy as np

from models.face import Frame
from streamer.pipeline.swap_engines.base import StreamMemory, SwapOptions
from streamer.pipeline.swap_engines.mesh import MeshEngine, paste_box
from streamer.pipeline.swap_engines.mesh_memory import MeshMemory
from streamer.pipeline.swap_engines.mesh_occlusion import REFIT_FRAMES
from tests.integration.test_mesh_quality import faces_of, load


def covered(image: Frame, mesh: np.ndarray, share: float) -> Frame:
    """A dark board over the left `share` of the face's width, forehead to chin and past them."""
    left, right = float(mesh[:, 0].min()), float(mesh[:, 0].max())
    top, bottom = float(mesh[:, 1].min()), float(mesh[:, 1].max())
    painted = image.copy()
    x = int(left + share * (right - left))
    cv2.rectangle(painted, (int(left) - 10, int(top) - 10), (x, int(bottom) + 10), (32, 34, 40), -1)
    return painted


def test_an_unchanging_face_keeps_a_steady_mask(engine: MeshEngine, media_dir: Path) -> None:
    """fr_lin_manuel_miranda holds a microphone at his chin: found on every frame, the same each time."""
    target = load(media_dir, "fr_lin_manuel_miranda.png")
    face = faces_of(engine, target)[0]
    source = engine.prepare_source(load(media_dir, "fr_obama.jpg"))
    memory, covers, outputs = StreamMemory(), [], []
    for _ in range(REFIT_FRAMES + 5):
        outputs.append(engine.swap(target, [face], source, SwapOptions(memory=memory)))
        assert engine.last_occlusion is not None
        covers.append(engine.last_occlusion.cover)
    print(f"\ncovers of one still frame over a track: {np.round(covers, 3)}")
    assert min(covers) > 0.01  # the microphone
    assert max(covers) - min(covers) <= 0.01  # no creep, no flicker
    assert np.abs(outputs[-1].astype(np.int16) - outputs[-2]).mean() < 0.1  # settled


def test_a_covered_face_fades_out_and_never_teaches_the_skin_model(
    engine: MeshEngine, media_dir: Path
) -> None:
    target = load(media_dir, "fr_obama.jpg")
    face = faces_of(engine, target)[0]
    assert face.mesh is not None
    source = engine.prepare_source(load(media_dir, "fr_biden2.jpg"))
    memory = StreamMemory()
    engine.swap(target, [face], source, SwapOptions(memory=memory))
    track = memory.part(MeshMemory).track(face.track_id).occlusion
    model = track.model
    assert model is not None
    board = covered(target, face.mesh, 0.75)
    fades, changed = [], []
    x1, y1, x2, y2 = paste_box(face.mesh, target.shape[1], target.shape[0])
    for _ in range(2 * REFIT_FRAMES + 2):
        swapped = engine.swap(board, [face], source, SwapOptions(memory=memory))
        assert engine.last_occlusion is not None
        fades.append(engine.last_occlusion.fade)
        changed.append(float(np.abs(swapped.astype(np.int16) - board)[y1:y2, x1:x2].mean()))
    print(
        f"\nfade while covered: {np.round(fades[:8], 2)} ...; change in the box {np.round(changed[:8], 1)} ..."
    )
    assert track.model is model  # never refitted from a covered frame
    assert all(later <= earlier + 1e-6 for earlier, later in itertools.pairwise(fades))  # fades out...
    assert fades[0] > 0.3 and fades[1] > 0.1  # ...over frames, not at once
    assert fades[-1] < 0.01 and changed[-1] < 0.5  # until the face is left as it is
