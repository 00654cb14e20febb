"""A large face's paste box is grown to a multiple of its whole shrink factor, so the shrink is a plain
block mean; where the frame has no room, the fractional working size as before."""

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from gpu_ops.working_resolution import working_size
from models import face_mesh_topology as topology
from streamer.pipeline.swap_engines.mesh_geometry import face_geometry, paste_box, widened_to_multiple

FRONTAL_MESH: NDArray[np.float32] = np.load(Path(__file__).parent / "data" / "face_mesh_468_frontal.npy")
SRC_TRIANGLES = np.zeros((len(topology.ALL_TRIANGLES), 3, 2), np.float32)  # the source side plays no part


def scaled_mesh(longest: float, corner: tuple[float, float]) -> NDArray[np.float32]:
    """The frontal mesh scaled so its larger side is `longest` px, its top-left at `corner`."""
    mesh = FRONTAL_MESH.astype(np.float32).copy()
    low = mesh[:, :2].min(axis=0)
    scale = longest / float((mesh[:, :2].max(axis=0) - low).max())
    mesh[:, :2] = (mesh[:, :2] - low) * scale + np.array(corner, np.float32)
    mesh[:, 2] *= scale
    return mesh


def test_the_box_grows_towards_the_far_edge_or_the_near_one_at_the_frame_edge() -> None:
    assert widened_to_multiple((10, 20, 111, 222), 2, 1280, 720) == (10, 20, 112, 222)
    assert widened_to_multiple((10, 20, 111, 222), 3, 1280, 720) == (10, 20, 112, 224)
    assert widened_to_multiple((1179, 20, 1280, 221), 2, 1280, 720) == (1178, 20, 1280, 222)
    assert widened_to_multiple((0, 0, 1279, 719), 2, 1279, 719) is None  # the frame itself is odd


def test_a_720p_close_up_is_shrunk_by_a_whole_factor_and_its_box_still_holds_the_mesh() -> None:
    mesh = scaled_mesh(523.0, (400.3, 100.7))
    geometry = face_geometry(mesh, (1280, 720), SRC_TRIANGLES, 288)
    x1, y1, x2, y2 = geometry.box
    px1, py1, px2, py2 = paste_box(mesh, 1280, 720)
    assert x1 <= px1 and y1 <= py1 and x2 >= px2 and y2 >= py2
    assert (x2 - x1) - (px2 - px1) < 2 and (y2 - y1) - (py2 - py1) < 2
    assert (x2 - x1) % 2 == 0 and (y2 - y1) % 2 == 0
    assert geometry.working == ((x2 - x1) // 2, (y2 - y1) // 2)
    # the mesh in the small region's pixels: a frame px p maps to (p - corner + 0.5) / 2 - 0.5
    expected = (mesh[:, :2] - np.array([x1, y1], np.float32) + 0.5) / 2 - 0.5
    np.testing.assert_allclose(geometry.region_mesh[:, :2], expected, atol=1e-3)


def test_a_face_filling_an_odd_sized_frame_keeps_the_fractional_working_size() -> None:
    mesh = scaled_mesh(700.0, (0.0, 0.0))
    mesh[:, :2] = np.clip(mesh[:, :2], 0, 400)  # every edge of the 401 x 401 frame touched
    geometry = face_geometry(mesh, (401, 401), SRC_TRIANGLES, 180)
    x1, y1, x2, y2 = geometry.box
    assert geometry.box == paste_box(mesh, 401, 401) == (0, 0, 401, 401)
    assert geometry.working == working_size((x2 - x1, y2 - y1), 180)
