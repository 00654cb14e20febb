"""Hands in front of a target face (issue 18): a skin-toned hand passes the skin model, so the mesh
engine asks the hand models (models/hands.py) where a hand is and the occlusion mask keeps it.

The palm detector runs on a square around the face (CROP_GROWTH x the face box), where a hand in front of
the face is large enough for its 192-px input; the landmark model's presence (> 0.5) rejects its false
positives on bare skin. A hand's outline is its palm and each finger bone, grown by a finger's half
width (the landmarks are the joints' centres): the face between spread fingers, or between the thumb and
the index, is not the hand's.

Cost: the palm detector is ~15 ms and the landmarks ~5 ms on this CPU, so on a face track they do not run
every frame: with no hand found, the palm search runs every `SEARCH_FRAMES` frames, or sooner when the
face box's look has changed since the last search (a hand coming in, quickly or slowly; at most every
`SEARCH_GAP` frames, so a head moving about does not search every frame); a hand found is
followed from frame to frame by the landmark model alone, on the region its last landmarks give (as
MediaPipe tracks hands). A hand neither followed nor found again (the models miss a painted or blurred
hand in some frames, one over the mouth) is held for `HOLD_FRAMES`, moving on as it moved, while it is
searched for every frame. A still image (no track) is searched every time, at both squares.
"""

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np
from numpy.typing import NDArray

from gpu_ops.backend import to_host
from models.hands import MAX_HANDS, MIN_PRESENCE, ROI_SCALE, ROI_SHIFT, Hand, HandFinder, Palm
from models.model_files import ModelStore

logger = logging.getLogger(__name__)

Points = NDArray[np.float32]

HAND_MODELS = ("palm_lite", "hand_landmark_lite")  # bundled (models/bundled/)
CROP_GROWTHS = (2.2, 1.6)  # the palm search's squares, in face boxes (a track's is the first)
PALM_SCORE = 0.3  # palms kept for the landmark model...
SEARCH_PRESENCE = 0.9  # ...and the presence a hand newly found needs (a cheek or a brow can reach 0.75-0.89
# with a cup or a phone beside it); a hand followed from the last frame needs models.hands.MIN_PRESENCE
SEARCH_FRAMES = 60  # a track with no hand is searched this often...
THUMB = 8  # ...or when a cell of the face box's THUMB x THUMB thumbnail...
THUMB_INSET = 0.1  # (of the box's inner part, less this share each side...
THUMB_SAMPLES = 8  # ...from this many px along a cell's side)
THUMB_STEPS = 3  # ...kept in thirds of a cell, so the box may have slid a third of a cell since...
THUMB_SLIDE = 1  # ...(this many of those steps any way)...
CHANGE_LEVELS = 32.0  # ...changes by more than this since the last search...
# ...or by more than this in WATCH_FRAMES checks in a row: a hand rising slowly from below the chin changes
# the bottom cells by 28-32 for several frames, while the box's jitter against a panning face (40 levels
# at most, at an eighth of the frames swapped) lasts one check (the bench's panning face: 19-24 at most
# in a row, at every, every fifth and every eighth frame)
WATCH_LEVELS, WATCH_FRAMES = 25.0, 2
SEARCH_GAP = 3  # ...and this many frames have passed (a head moving about would search every frame)
FOLLOW_SCALE, FOLLOW_SHIFT = 2.0, -0.1  # MediaPipe's hand-landmarks-to-region transform
REFOUND_REACH = 1.0  # a hand found this near a held one (in wrist-to-knuckle lengths) is that hand
HOLD_FRAMES = 12  # a hand not found is held (moving on as it moved, slowing down) this many frames
HOLD_DAMPING = 0.7  # of its last motion per frame held
FINGER_HALF_WIDTH = 0.12  # of the wrist to middle-finger knuckle length
PALM = (0, 1, 2, 5, 9, 13, 17)  # the wrist, the thumb's base and the knuckles (MediaPipe's 21 points)
FINGERS = ((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11, 12), (13, 14, 15, 16), (17, 18, 19, 20))
# an outline's convex pieces: the palm, then each finger bone (its two joints)
PIECES = (PALM, *(bone for finger in FINGERS for bone in itertools.pairwise(finger)))


@dataclass
class HandTrack:
    """One face track's hands: the last found, frames since the last palm search, the box's thumbnail."""

    hands: list[Hand] = field(default_factory=list)
    frames_since_search: int = SEARCH_FRAMES
    thumbnail: NDArray[np.float32] | None = None
    velocity: list[NDArray[np.float32]] = field(default_factory=list)  # px per frame, per hand
    held_frames: int = 0  # frames the hands have been held without being found
    watched: int = 0  # checks in a row the face's look changed by WATCH_LEVELS since the last search
    searches: int = 0  # palm searches run (the bench, the tests)


def outline(hand: Hand) -> list[Points]:
    """The hand as convex pieces, [K, 2] frame px each: the palm's hull and one hull per finger bone,
    grown by a finger's half width (the landmarks are the joints' centres). One hull of the whole hand
    took the face between the thumb and the fingers along: a hand over a fifth to 30 % of a face's oval
    counted as half of it, and the swap began to fade out."""
    points = hand.points[:, :2].astype(np.float32)
    grow = FINGER_HALF_WIDTH * float(np.linalg.norm(points[9] - points[0]))
    angles = np.linspace(0.0, 2.0 * np.pi, 12, endpoint=False)
    ring = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32) * grow
    return [
        np.asarray(
            cv2.convexHull((points[list(piece)][:, None, :] + ring[None]).reshape(-1, 2)), np.float32
        ).reshape(-1, 2)
        for piece in PIECES
    ]


def _centre(hand: Hand) -> NDArray[np.float32]:
    return np.asarray(hand.points[:, :2].mean(axis=0), np.float32)


def _moved(hand: Hand, step: NDArray[np.float32]) -> Hand:
    points = hand.points.copy()
    points[:, :2] += step
    return Hand(points, hand.presence, hand.palm_score)


def _near(hand: Hand, others: Sequence[Hand]) -> bool:
    """Whether `hand` lies within REFOUND_REACH of its own size from one of `others`."""
    size = float(np.linalg.norm(hand.points[9, :2] - hand.points[0, :2]))
    return any(
        float(np.linalg.norm(_centre(hand) - _centre(other))) < REFOUND_REACH * size for other in others
    )


def _palm_of(hand: Hand) -> Palm:
    """The region MediaPipe follows a hand by, from its landmarks (the landmarks' box in the hand's own
    rotation, wrist to middle knuckle up, scaled FOLLOW_SCALE, moved FOLLOW_SHIFT of its height towards
    the fingers), written as the palm detection whose landmark region (models.hands.roi_matrix) it is."""
    points = hand.points[:, :2].astype(np.float64)
    wrist, knuckle = points[0], points[9]
    rotation = np.pi / 2.0 - np.arctan2(-(knuckle[1] - wrist[1]), knuckle[0] - wrist[0])
    cos, sin = np.cos(rotation), np.sin(rotation)
    turned = points @ np.array([[cos, sin], [-sin, cos]]).T  # the hand's own frame, fingers up
    low, high = turned.min(axis=0), turned.max(axis=0)
    centre = np.array([[cos, -sin], [sin, cos]]) @ ((low + high) / 2.0)  # back to the frame
    height = float(high[1] - low[1])
    side = FOLLOW_SCALE * float(max(high - low))
    palm_side = side / ROI_SCALE
    towards_wrist = np.array([-sin, cos])
    # roi_matrix moves a palm's centre by ROI_SHIFT x its height along towards_wrist
    palm_centre = centre + towards_wrist * (FOLLOW_SHIFT * height - ROI_SHIFT * palm_side)
    keys = np.zeros((7, 2), np.float32)
    keys[0], keys[2] = wrist, knuckle
    return Palm(
        centre=palm_centre.astype(np.float32),
        size=np.array([palm_side, palm_side], np.float32),
        points=keys,
        score=hand.palm_score,
    )


def _face_square(
    box: NDArray[np.float32], shape: tuple[int, ...], growth: float
) -> tuple[int, int, int, int]:
    cx, cy = (box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0
    half = growth * max(float(box[2] - box[0]), float(box[3] - box[1])) / 2.0
    x0, y0 = int(max(0.0, cx - half)), int(max(0.0, cy - half))
    x1, y1 = int(min(float(shape[1]), cx + half)), int(min(float(shape[0]), cy + half))
    return x0, y0, x1, y1


class FaceHands:
    """The hands in front of one face, searched or followed as the module docstring says."""

    def __init__(self, finder: HandFinder) -> None:
        self.finder = finder
        self.search_listeners: list[Callable[[], None]] = []  # told of every palm search (/metrics)

    def search(
        self,
        frame: object,
        box: NDArray[np.float32],
        growth: float = CROP_GROWTHS[0],
        held: Sequence[Hand] = (),
    ) -> list[Hand]:
        """Palm search on the square `growth` x `box` (x1, y1, x2, y2 frame px), then landmarks: hands
        with presence over SEARCH_PRESENCE, or over MIN_PRESENCE near one of the `held` hands (the
        same hand found again)."""
        x0, y0, x1, y1 = _face_square(box, frame.shape, growth)  # type: ignore[attr-defined]
        if x1 - x0 < 8 or y1 - y0 < 8:
            return []
        for listener in self.search_listeners:
            listener()
        square = np.ascontiguousarray(to_host(frame[y0:y1, x0:x1]))  # type: ignore[index]
        shift = np.array([x0, y0], np.float32)
        hands = []
        for palm in self.finder.palms(square, PALM_SCORE)[:MAX_HANDS]:
            hand = self.finder.landmarks(square, Palm(palm.centre, palm.size, palm.points, palm.score))
            points = hand.points.copy()
            points[:, :2] += shift
            found = Hand(points, hand.presence, hand.palm_score)
            if hand.presence > SEARCH_PRESENCE or (hand.presence > MIN_PRESENCE and _near(found, held)):
                hands.append(found)
        return hands

    def follow(self, frame: object, hand: Hand) -> Hand | None:
        """The hand again in this frame, from its last landmarks (None when it is gone)."""
        palm = _palm_of(hand)
        side = 3.0 * float(palm.size[0])
        x0 = int(max(0.0, float(palm.centre[0]) - side))
        y0 = int(max(0.0, float(palm.centre[1]) - side))
        x1 = int(min(float(frame.shape[1]), float(palm.centre[0]) + side))  # type: ignore[attr-defined]
        y1 = int(min(float(frame.shape[0]), float(palm.centre[1]) + side))  # type: ignore[attr-defined]
        if x1 - x0 < 8 or y1 - y0 < 8:
            return None
        shift = np.array([x0, y0], np.float32)
        window = np.ascontiguousarray(to_host(frame[y0:y1, x0:x1]))  # type: ignore[index]
        local = Palm(palm.centre - shift, palm.size, palm.points - shift, palm.score)
        found = self.finder.landmarks(window, local)
        if found.presence <= MIN_PRESENCE:
            return None
        points = found.points.copy()
        points[:, :2] += shift
        return Hand(points, found.presence, hand.palm_score)

    def outlines(self, frame: object, box: NDArray[np.float32], track: HandTrack | None) -> list[Points]:
        """The grown outlines (frame px, convex pieces: `outline`) of the hands in front of the face in
        `box`; with a track, at the track's cadence."""
        if track is None:  # a still image: every square
            for growth in CROP_GROWTHS:
                hands = self.search(frame, box, growth)
                if hands:
                    return [piece for hand in hands for piece in outline(hand)]
            return []
        thumbnail = self._thumbnail(frame, box)
        track.frames_since_search += 1
        # against the face's look at the last search, so a hand raised slowly adds up to a change too
        change = (
            thumbnail_change(thumbnail, track.thumbnail)
            if track.thumbnail is not None and thumbnail is not None and track.frames_since_search >= SEARCH_GAP
            else 0.0
        )
        track.watched = track.watched + 1 if change > WATCH_LEVELS else 0
        changed = change > CHANGE_LEVELS or track.watched >= WATCH_FRAMES
        found = [hand for hand in (self.follow(frame, hand) for hand in track.hands) if hand is not None]
        # a hand that slipped from its region (or one held) is searched for again at once
        if not found and (changed or track.hands or track.frames_since_search >= SEARCH_FRAMES):
            found = self.search(frame, box, held=track.hands)
            track.frames_since_search, track.watched = 0, 0
            track.searches += 1
            track.thumbnail = thumbnail
        if found:
            same = len(found) == len(track.hands)
            track.velocity = [
                _centre(new) - _centre(old) if same else np.zeros(2, np.float32)
                for new, old in zip(found, track.hands if same else found, strict=True)
            ]
            track.hands, track.held_frames = found, 0
        elif track.hands and track.held_frames < HOLD_FRAMES:
            # not found this frame (a painted or blurred hand, one over the mouth): held where it was
            # heading, for a bounded time
            track.velocity = [step * np.float32(HOLD_DAMPING) for step in track.velocity]
            track.hands = [_moved(hand, step) for hand, step in zip(track.hands, track.velocity, strict=True)]
            track.held_frames += 1
        else:
            track.hands, track.velocity = [], []
        return [piece for hand in track.hands for piece in outline(hand)]

    @staticmethod
    def _thumbnail(frame: object, box: NDArray[np.float32]) -> NDArray[np.float32] | None:
        """The grey thumbnail of the face box's inner part (the background at its edges shifts with
        every move of the box, a hand coming in crosses the face), THUMB x THUMB cells in THUMB_STEPS
        steps each way (`thumbnail_change` compares two), from a grid of
        THUMB_SAMPLES x THUMB_SAMPLES pixels per cell (every second pixel of a 480p face's box, every
        fifth of a 720p close-up's): a sparser grid aliases the face's fine detail, and a head moving a
        pixel in its box read as a sudden change (4 samples a cell: 33-37 levels every 22 frames of
        the bench's panning face, a palm search each time; 8: 3-9 levels, none)."""
        inset = THUMB_INSET * (box[2:] - box[:2])
        x1, y1 = (int(max(0.0, float(v))) for v in box[:2] + inset)
        x2 = int(min(float(frame.shape[1]), float(box[2] - inset[0])))  # type: ignore[attr-defined]
        y2 = int(min(float(frame.shape[0]), float(box[3] - inset[1])))  # type: ignore[attr-defined]
        if x2 - x1 < THUMB or y2 - y1 < THUMB:
            return None
        step = max(1, min(x2 - x1, y2 - y1) // (THUMB_SAMPLES * THUMB))
        sparse = np.ascontiguousarray(to_host(frame[y1:y2:step, x1:x2:step]))  # type: ignore[index]
        side = THUMB * THUMB_STEPS
        thumb = cv2.resize(sparse, (side, side), interpolation=cv2.INTER_AREA)
        return np.asarray(thumb, np.float32).mean(axis=2)


def cells(thumbnail: NDArray[np.float32]) -> NDArray[np.float32]:
    """The THUMB x THUMB cell means of a thumbnail (`FaceHands._thumbnail`)."""
    return thumbnail.reshape(THUMB, THUMB_STEPS, THUMB, THUMB_STEPS).mean(axis=(1, 3))


def thumbnail_change(current: NDArray[np.float32], reference: NDArray[np.float32]) -> float:
    """The largest change of a cell's mean since `reference`, where the reference may have slid by up
    to THUMB_SLIDE steps (a third of a cell) any way: the face box lags or jitters a few px against the face,
    most at a reduced swap share (every fifth frame of the bench's panning face: 40-45 levels in the
    cell at an eye or the hairline, past CHANGE_LEVELS, a palm search in one swapped frame of eight;
    allowing the slide: 26-32), while a hand coming in changes its cells however they are aligned."""
    now = cells(current)
    padded = np.pad(reference, THUMB_SLIDE, mode="edge")  # a slide past the edge repeats it
    height, width = reference.shape
    offsets = range(2 * THUMB_SLIDE + 1)
    return min(
        float(np.abs(now - cells(padded[dy : dy + height, dx : dx + width])).max())
        for dy in offsets
        for dx in offsets
    )


def load_face_hands(store: ModelStore, session: Callable[[str], object]) -> "FaceHands | None":
    """The hand finder on the lite hand models when the store has them (`session(name)` creates a
    model's session), else None: occlusion by the skin model alone."""
    if not all(store.is_available(name) for name in HAND_MODELS):
        logger.info("hand models unavailable: occlusion by the skin model alone")
        return None
    palm, landmark = HAND_MODELS
    finder = HandFinder(
        session(palm),  # type: ignore[arg-type]
        store.spec(palm),
        session(landmark),  # type: ignore[arg-type]
        store.spec(landmark),
    )
    return FaceHands(finder)
