"""What the mesh engine remembers about a stream between frames, per face track: so skin tone does not pump.

Every frame measures the target's shading under the face anew (gpu_ops.color_transfer.shading_ratio)
over the pixels the paste mask covers; when the head turns, the mouth opens or an eye blinks, those
pixels change, and so would the tone of the whole face from one frame to the next. The lips weight
(the target's own lips shown over a wide-open mouth) flickers the same way with a jittery mouth
openness. So both are smoothed per face track:
- the shading ratio in the log domain, with a weight that follows the size of the change (as a
  One-Euro filter does with speed): a change of a few percent is noise and is smoothed hard; a
  change of `follow_change[1]` or more is a real change of light and is taken at once;
- the lips weight with a plain exponential average.
The coarse grid of the ratio is fixed when a track starts, so its cells stay comparable from frame to
frame. State is dropped when the source changes and for tracks not seen for `TRACK_HOLD_FRAMES`.
Array maths runs on the ratio's own device (NumPy or CuPy): no transfer, no sync.
"""

import logging
from dataclasses import dataclass, field
from typing import Any

from gpu_ops.backend import get_array_module
from streamer.pipeline.swap_engines.mesh_hands import HandTrack
from streamer.pipeline.swap_engines.mesh_occlusion import OcclusionTrack

logger = logging.getLogger(__name__)

TRACK_HOLD_FRAMES = 30  # a track unseen this many frames is forgotten (the tracker has dropped it)


@dataclass(frozen=True)
class Smoothing:
    """How strongly per-frame measurements are smoothed (weights are of the new frame, 1 = no smoothing)."""

    shading_weight: float = 0.3  # for changes below follow_change[0]
    follow_change: tuple[float, float] = (
        0.03,
        0.15,
    )  # mean |log ratio change|: start following, follow at once
    lips_weight: float = 0.5


@dataclass
class TrackMemory:
    """One face track's smoothed state."""

    grid: tuple[int, int] | None = None  # (gw, gh) of the shading ratio, fixed for the track
    log_ratio: Any = None  # [gh, gw, 3] smoothed log shading ratio (NumPy or CuPy)
    lips_weight: float | None = None
    occlusion: OcclusionTrack = field(default_factory=OcclusionTrack)
    hands: HandTrack = field(default_factory=HandTrack)
    last_frame: int = 0


@dataclass
class MeshMemory:
    """The mesh engine's part of a stream's memory: its tracks, for one source."""

    source: object = None  # held (not its id: a freed source's id may be reused by the next one)
    frame: int = 0
    tracks: dict[int, TrackMemory] = field(default_factory=dict)

    def begin_frame(self, source: object) -> None:
        """Count a frame; forget everything when the source changed and tracks that have gone."""
        self.frame += 1
        if source is not self.source:
            if self.tracks:
                logger.debug("source changed: %d face tracks reset", len(self.tracks))
            self.tracks.clear()
            self.source = source
        gone = [
            key for key, track in self.tracks.items() if self.frame - track.last_frame > TRACK_HOLD_FRAMES
        ]
        for key in gone:
            del self.tracks[key]

    def track(self, track_id: int) -> TrackMemory:
        """The memory of one face track (new and empty for a track not seen before)."""
        track = self.tracks.setdefault(track_id, TrackMemory())
        track.last_frame = self.frame
        return track


def smooth_shading_ratio(track: TrackMemory, ratio: Any, smoothing: Smoothing) -> Any:
    """The track's smoothed ratio after this frame's `ratio` (float32 [gh, gw, 3], NumPy or CuPy)."""
    xp = get_array_module(ratio)
    log_ratio = xp.log(ratio)
    if track.log_ratio is None or track.log_ratio.shape != log_ratio.shape:
        track.log_ratio = log_ratio
        return ratio
    change = log_ratio - track.log_ratio
    low, high = smoothing.follow_change
    follow = xp.clip((xp.abs(change).mean() - low) / max(high - low, 1e-6), 0.0, 1.0)
    weight = smoothing.shading_weight + (1.0 - smoothing.shading_weight) * follow
    track.log_ratio = track.log_ratio + weight * change
    return xp.exp(track.log_ratio).astype(xp.float32)


def smooth_lips_weight(track: TrackMemory, lips_weight: float, smoothing: Smoothing) -> float:
    """The track's smoothed lips weight after this frame's."""
    if track.lips_weight is None:
        track.lips_weight = lips_weight
    else:
        track.lips_weight += smoothing.lips_weight * (lips_weight - track.lips_weight)
    return track.lips_weight
