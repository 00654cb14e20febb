"""The face record every stage after detection shares: where it is, its 5 points, its dense mesh."""

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Frame = NDArray[np.uint8]  # H x W x 3, RGB, C-contiguous
Points = NDArray[np.float32]


@dataclass(frozen=True)
class TrackedFace:
    """One face in one frame, in frame pixels.

    `landmarks_5`: [5,2], InsightFace order (eye image-left, eye image-right, nose, mouth image-left,
    mouth image-right). `mesh`: [468,3] MediaPipe face mesh (x, y in frame px, z relative depth in the
    same px scale), or None when no landmarker ran. `track_id` is stable while the tracker holds the face.
    """

    track_id: int
    box: NDArray[np.float32]  # [4] x1, y1, x2, y2
    score: float
    landmarks_5: Points
    mesh: Points | None = None

    @property
    def area(self) -> float:
        x1, y1, x2, y2 = (float(v) for v in self.box)
        return max(0.0, x2 - x1) * max(0.0, y2 - y1)
