"""Mesh warp: exact corner mapping, one remap without cracks, zero outside, front faces win, parity."""

from pathlib import Path

import cv2
import numpy as np
import pytest
from numpy.typing import NDArray

from gpu_ops.backend import cupy_available
from gpu_ops.errors import InvalidFrameError
from gpu_ops.mesh_warp import (
    OUTSIDE,
    apply_remap_cpu,
    build_remap_cpu,
    color_channels,
    rasterize_triangle_ids_cpu,
    triangle_affines,
    warp_mesh,
    warp_mesh_cpu,
)
from models import face_mesh_topology as topology

CUPY_OK, CUPY_REASON = cupy_available()
FRONTAL_MESH = np.load(
    Path(__file__).parents[1] / "streamer" / "pipeline" / "data" / "face_mesh_468_frontal.npy"
)


def grid_mesh(
    columns: int, rows: int, step: float, origin: tuple[float, float], jitter: float, seed: int
) -> tuple[NDArray[np.float32], NDArray[np.int32]]:
    """A jittered grid of points (inner points only jittered) and its two triangles per cell."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:rows, 0:columns].astype(np.float32)
    points = np.stack([xs.ravel() * step + origin[0], ys.ravel() * step + origin[1]], axis=1)
    inner = (xs.ravel() > 0) & (xs.ravel() < columns - 1) & (ys.ravel() > 0) & (ys.ravel() < rows - 1)
    points[inner] += rng.uniform(-jitter, jitter, (int(inner.sum()), 2)).astype(np.float32)
    triangles = []
    for row in range(rows - 1):
        for column in range(columns - 1):
            a = row * columns + column
            b, c, d = a + 1, a + columns, a + columns + 1
            triangles += [(a, b, d), (a, d, c)]
    return points.astype(np.float32), np.array(triangles, np.int32)


def test_affines_map_each_dst_triangle_onto_its_src_triangle() -> None:
    rng = np.random.default_rng(1)
    dst = rng.uniform(0, 100, (50, 3, 2)).astype(np.float32)
    src = rng.uniform(0, 100, (50, 3, 2)).astype(np.float32)
    affines = triangle_affines(dst, src).astype(np.float64)
    mapped = np.einsum("tij,tkj->tki", affines[:, :, :2], dst) + affines[:, None, :, 2]
    np.testing.assert_allclose(mapped, src, atol=2e-3)


def test_degenerate_triangle_gets_zero_affine_and_is_not_drawn() -> None:
    dst = np.array([[[1, 1], [5, 5], [9, 9]]], np.float32)  # collinear
    assert not triangle_affines(dst, dst).any()
    assert (rasterize_triangle_ids_cpu(dst, (12, 12)) == OUTSIDE).all()


def test_constant_texture_covers_every_pixel_inside_the_hull() -> None:
    points, triangles = grid_mesh(9, 11, 13.0, (4.3, 3.7), jitter=4.0, seed=3)
    src_points = points * 0.7 + 5.0
    texture = np.full((120, 120, 4), 200, np.uint8)
    size = (120, 150)
    warped = warp_mesh_cpu(texture, src_points[triangles], points[triangles], size)
    hull = np.zeros((size[1], size[0]), np.uint8)
    cv2.fillConvexPoly(hull, cv2.convexHull(np.round(points).astype(np.int32)), 255)
    inside = cv2.erode(hull, np.ones((3, 3), np.uint8)) > 0
    assert inside.sum() > 10000
    assert (warped[inside] == 200).all(), "crack: a pixel inside the mesh was not covered"


def test_pixels_outside_the_mesh_are_zero_in_every_channel() -> None:
    points, triangles = grid_mesh(4, 4, 10.0, (20.0, 20.0), jitter=0.0, seed=0)
    texture = np.full((80, 80, 4), 255, np.uint8)
    warped = warp_mesh_cpu(texture, points[triangles], points[triangles], (80, 80))
    assert (warped[:18] == 0).all() and (warped[:, :18] == 0).all() and (warped[53:] == 0).all()
    assert (warped[22:48, 22:48] == 255).all()


def test_identity_mesh_reproduces_the_texture_and_translation_shifts_it() -> None:
    rng = np.random.default_rng(5)
    texture = rng.integers(0, 256, (100, 100, 3), dtype=np.uint8)
    points, triangles = grid_mesh(6, 6, 15.0, (10.0, 10.0), jitter=3.0, seed=7)
    same = warp_mesh_cpu(texture, points[triangles], points[triangles], (100, 100))
    np.testing.assert_array_equal(same[15:80, 15:80], texture[15:80, 15:80])
    moved = (points + np.array([3.0, 5.0], np.float32))[triangles]
    shifted = warp_mesh_cpu(texture, moved, points[triangles], (100, 100))
    np.testing.assert_array_equal(shifted[15:80, 15:80], texture[20:85, 18:83])


def test_front_facing_triangle_wins_over_a_folded_one() -> None:
    front = np.array([[[0, 0], [20, 0], [0, 20]]], np.float32)  # positive signed area (y down)
    folded = np.array([[[0, 0], [0, 20], [20, 0]]], np.float32)
    ids = rasterize_triangle_ids_cpu(np.concatenate([front, folded]), (24, 24))
    assert ids[5, 5] == 0
    ids = rasterize_triangle_ids_cpu(np.concatenate([folded, front]), (24, 24))
    assert ids[5, 5] == 1


def test_remap_field_is_minus_one_outside() -> None:
    points, triangles = grid_mesh(3, 3, 10.0, (10.0, 10.0), jitter=0.0, seed=0)
    map_x, map_y = build_remap_cpu(points[triangles], points[triangles], (40, 40))
    assert map_x[0, 0] == -1 and map_y[0, 0] == -1
    assert map_x[15, 12] == pytest.approx(12.0) and map_y[15, 12] == pytest.approx(15.0)


def test_uncovered_pixels_pointed_at_a_blank_texel_warp_to_the_same_pixels() -> None:
    """The mesh engine's field sends uncovered pixels to a texel that is 0 in every channel instead of
    off the texture (OpenCV's fast path): the warped pixels are the same, bit for bit."""
    rng = np.random.default_rng(5)
    texture = rng.integers(1, 256, (96, 96, 4), dtype=np.uint8)
    texture[0, 0] = 0
    points, triangles = grid_mesh(6, 6, 12.0, (8.0, 8.0), jitter=3.0, seed=4)
    src = (points * 0.8 + 10.0)[triangles]
    off_texture = build_remap_cpu(points[triangles], src, (80, 80))
    to_blank = build_remap_cpu(points[triangles], src, (80, 80), outside=(0.0, 0.0))
    uncovered = off_texture[0] == -1
    assert uncovered.any() and (to_blank[0][uncovered] == 0).all() and (to_blank[1][uncovered] == 0).all()
    expected = apply_remap_cpu(texture, off_texture)
    assert np.array_equal(apply_remap_cpu(texture, to_blank), expected)
    assert (expected[uncovered] == 0).all()


def test_bad_shapes_raise() -> None:
    triangles = np.zeros((4, 3, 2), np.float32)
    with pytest.raises(InvalidFrameError):
        build_remap_cpu(triangles, triangles[:3], (10, 10))
    with pytest.raises(InvalidFrameError):
        warp_mesh_cpu(np.zeros((4, 4), np.float32), triangles, triangles, (10, 10))  # type: ignore[arg-type]


@pytest.mark.gpu
@pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)
def test_warp_mesh_parity() -> None:
    import cupy

    rng = np.random.default_rng(11)
    texture = rng.integers(0, 256, (128, 128, 4), dtype=np.uint8)
    points, triangles = grid_mesh(8, 8, 14.0, (6.0, 6.0), jitter=4.0, seed=2)
    src = (points * 0.9 + 4.0)[triangles]
    expected = warp_mesh_cpu(texture, src, points[triangles], (110, 110))
    result = cupy.asnumpy(warp_mesh(cupy.asarray(texture), src, points[triangles], (110, 110)))
    # tolerance: 1 level (bilinear rounding may differ between OpenCV's fixed point and a kernel)
    assert np.abs(result.astype(int) - expected.astype(int)).max() <= 1


@pytest.mark.gpu
@pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)
def test_device_field_and_remap_equal_the_cpu_bit_for_bit() -> None:
    import cupy

    from gpu_ops.mesh_warp import apply_remap, apply_remap_cpu, build_remap

    rng = np.random.default_rng(12)
    texture = rng.integers(0, 256, (128, 128, 4), dtype=np.uint8)
    points, triangles = grid_mesh(9, 9, 13.0, (4.5, 5.5), jitter=4.0, seed=6)
    src = (points * 0.85 + 6.0)[triangles]
    field = build_remap(points[triangles], src, (115, 118), on_device=True)
    assert isinstance(field[0], cupy.ndarray)
    expected = build_remap_cpu(points[triangles], src, (115, 118))
    np.testing.assert_array_equal(cupy.asnumpy(field[0]), expected[0])
    np.testing.assert_array_equal(cupy.asnumpy(field[1]), expected[1])
    warped = apply_remap(cupy.asarray(texture), field)
    assert isinstance(warped, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(warped), apply_remap_cpu(texture, expected))


def gathered_remap(
    dst_triangles: NDArray[np.float32], src_triangles: NDArray[np.float32], size: tuple[int, int]
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """The field as build_remap_cpu made it before its per-coefficient gathers: all six coefficients
    of every pixel's triangle gathered at once ([h,w,6]), then the same float32 sums."""
    width, height = size
    ids = rasterize_triangle_ids_cpu(dst_triangles, size)
    affines = triangle_affines(dst_triangles, src_triangles).reshape(-1, 6)
    table = np.concatenate([affines, np.array([[0, 0, -1, 0, 0, -1]], np.float32)])
    coefficients = table[ids]
    xs = np.arange(width, dtype=np.float32)[None, :]
    ys = np.arange(height, dtype=np.float32)[:, None]
    map_x = coefficients[..., 0] * xs + coefficients[..., 1] * ys + coefficients[..., 2]
    map_y = coefficients[..., 3] * xs + coefficients[..., 4] * ys + coefficients[..., 5]
    return map_x, map_y


@pytest.mark.parametrize(
    ("scale", "degrees", "jitter"), [(1.0, 0.0, 0.0), (2.1, 14.0, 0.6), (0.7, -30.0, 1.5)]
)
def test_remap_field_equals_the_whole_coefficient_gather_bit_for_bit(
    scale: float, degrees: float, jitter: float
) -> None:
    """A real face mesh (turned, scaled, jittered so some triangles fold) over its paste box, warped
    from a 384-px source texture: the same float32 bits as the [h,w,6] gather, -1 outside included."""
    points = FRONTAL_MESH[:, :2] - FRONTAL_MESH[:, :2].mean(axis=0)
    angle = np.deg2rad(degrees)
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]], np.float32)
    rng = np.random.default_rng(20)
    target = (points @ rotation.T) * np.float32(scale) + rng.normal(0.0, jitter, points.shape)
    target = (target - target.min(axis=0) + 1.5).astype(np.float32)
    size = (int(np.ceil(target[:, 0].max())) + 2, int(np.ceil(target[:, 1].max())) + 2)
    source = (points * np.float32(384 / 130) + 192).astype(np.float32)
    dst, src = target[topology.ALL_TRIANGLES], source[topology.ALL_TRIANGLES]
    map_x, map_y = build_remap_cpu(dst, src, size)
    expected_x, expected_y = gathered_remap(dst, src, size)
    assert map_x.dtype == np.float32 and map_x.shape == (size[1], size[0])
    np.testing.assert_array_equal(map_x.view(np.int32), expected_x.view(np.int32))
    np.testing.assert_array_equal(map_y.view(np.int32), expected_y.view(np.int32))
    assert (map_x == -1).any() and (map_x != -1).mean() > 0.5


def test_color_channels_are_the_packed_rgb_of_a_warped_texture() -> None:
    """The colour of an RGBA texture warped onto a real face mesh: warped[..., :3], packed, a copy."""
    points = FRONTAL_MESH[:, :2] - FRONTAL_MESH[:, :2].min(axis=0) + 2.0
    size = (int(points[:, 0].max()) + 3, int(points[:, 1].max()) + 3)
    texture = np.random.default_rng(4).integers(0, 256, (384, 384, 4), dtype=np.uint8)
    source = (points * np.float32(2.5) + 20.0).astype(np.float32)
    warped = warp_mesh_cpu(texture, source[topology.ALL_TRIANGLES], points[topology.ALL_TRIANGLES], size)
    colour = color_channels(warped)
    assert colour.flags["C_CONTIGUOUS"] and not np.shares_memory(colour, warped)
    np.testing.assert_array_equal(colour, warped[..., :3])
    with pytest.raises(InvalidFrameError):
        color_channels(warped[..., :3])
