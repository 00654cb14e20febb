"""Per-stream memory of the mesh engine: one part per engine, tracks dropped with their source or when
gone, jitter smoothed hard, a real change of light followed at once."""

import numpy as np

from streamer.pipeline.swap_engines.base import StreamMemory
from streamer.pipeline.swap_engines.mesh_memory import (
    TRACK_HOLD_FRAMES,
    MeshMemory,
    Smoothing,
    TrackMemory,
    smooth_lips_weight,
    smooth_shading_ratio,
)


def test_each_stream_has_its_own_part_per_kind() -> None:
    first, second = StreamMemory(), StreamMemory()
    assert first.part(MeshMemory) is first.part(MeshMemory)
    assert first.part(MeshMemory) is not second.part(MeshMemory)
    assert isinstance(first.part(TrackMemory), TrackMemory) and first.part(TrackMemory) is not first.part(
        MeshMemory
    )


def test_tracks_are_dropped_with_their_source_and_when_gone() -> None:
    memory = MeshMemory()
    source, other_source = object(), object()
    memory.begin_frame(source)
    first = memory.track(1)
    first.lips_weight = 0.5
    memory.begin_frame(source)
    assert memory.track(1) is first
    memory.begin_frame(other_source)  # a new source photo: nothing measured for the old one counts
    assert memory.track(1) is not first and memory.track(1).lips_weight is None
    memory.track(2)
    for _ in range(TRACK_HOLD_FRAMES):
        memory.begin_frame(other_source)
        memory.track(1)
    memory.begin_frame(other_source)
    assert set(memory.tracks) == {1}  # track 2 was not seen for TRACK_HOLD_FRAMES frames


def test_jitter_is_smoothed_and_a_change_of_light_is_followed_at_once() -> None:
    rng = np.random.default_rng(0)
    smoothing = Smoothing()
    track = TrackMemory()
    base = rng.uniform(0.6, 1.6, (5, 4, 3)).astype(np.float32)
    first = smooth_shading_ratio(track, base, smoothing)
    np.testing.assert_array_equal(first, base)  # a new track starts from its first frame
    measured, smoothed = [], []
    for _ in range(60):
        noisy = (base * np.exp(rng.normal(0, 0.02, base.shape))).astype(np.float32)  # 2 % jitter
        measured.append(noisy)
        smoothed.append(smooth_shading_ratio(track, noisy, smoothing))
    jitter_in = np.std(np.log(np.stack(measured)), axis=0).mean()
    jitter_out = np.std(np.log(np.stack(smoothed)), axis=0).mean()
    assert jitter_out < 0.5 * jitter_in
    darker = (base * 0.6).astype(np.float32)  # the light goes down by 40 %
    followed = smooth_shading_ratio(track, darker, smoothing)
    assert np.abs(np.log(followed / darker)).max() < 0.03
    assert followed.dtype == np.float32 and followed.shape == base.shape


def test_lips_weight_is_an_exponential_average() -> None:
    track = TrackMemory()
    smoothing = Smoothing(lips_weight=0.5)
    assert smooth_lips_weight(track, 1.0, smoothing) == 1.0
    assert smooth_lips_weight(track, 0.0, smoothing) == 0.5
    assert smooth_lips_weight(track, 0.0, smoothing) == 0.25
