"""The hand check's cadence and geometry (streamer/pipeline/swap_engines/mesh_hands.py) with a scripted
hand finder: a palm search every SEARCH_FRAMES frames or on a sudden change, a found hand followed by the
landmark model alone, held a bounded time when lost, a hand newly found only at a high presence, and the
follow region placed on the hand (the landmarks inside it, fingers up)."""

import cv2
import numpy as np

from models.hands import Hand, Palm, roi_matrix
from streamer.pipeline.swap_engines import mesh_hands
from streamer.pipeline.swap_engines.mesh_hands import FaceHands, HandTrack, cells, outline, thumbnail_change

FRAME = np.full((240, 320, 3), 120, np.uint8)
BOX = np.array([100.0, 60.0, 200.0, 180.0], np.float32)


def upright_hand(centre: tuple[float, float] = (150.0, 130.0), presence: float = 0.97) -> Hand:
    """21 points of a hand, wrist at the bottom, fingers up, 60 px from wrist to fingertips."""
    x, y = centre
    points = np.zeros((21, 3), np.float32)
    points[0, :2] = (x, y + 30.0)  # wrist
    for finger in range(5):
        base = 1 + 4 * finger
        column = x - 16.0 + 8.0 * finger
        for joint in range(4):
            points[base + joint, :2] = (column, y + 5.0 - 8.0 * joint)
    points[9, :2] = (x, y + 5.0)  # middle-finger knuckle
    return Hand(points, presence, 0.8)


HAND_PIECES = 1 + 3 * 5  # a hand's outline: its palm and the three bones of each finger


class ScriptedFinder:
    """Finds `hand` (or nothing) with the palm detector; the landmark model reports `hand` with
    `presence` while `follows` says so."""

    def __init__(self, hand: Hand | None, presence: float = 0.97) -> None:
        self.hand, self.presence, self.follows = hand, presence, True
        self.searches = 0
        self.landmark_runs = 0

    def palms(self, frame: np.ndarray, score_threshold: float = 0.5) -> list[Palm]:
        self.searches += 1
        if self.hand is None:
            return []
        return [Palm(np.zeros(2, np.float32), np.ones(2, np.float32) * 20, np.zeros((7, 2), np.float32), 0.8)]

    def landmarks(self, frame: np.ndarray, palm: Palm) -> Hand:
        self.landmark_runs += 1
        if self.hand is None or not self.follows:
            return Hand(np.zeros((21, 3), np.float32), 0.0, palm.score)
        return Hand(self.hand.points.copy(), self.presence, palm.score)


def test_without_a_hand_the_palm_search_runs_at_the_cadence_or_on_a_sudden_change() -> None:
    finder = ScriptedFinder(None)
    hands, track = FaceHands(finder), HandTrack()  # type: ignore[arg-type]
    told: list[None] = []
    hands.search_listeners.append(lambda: told.append(None))  # /metrics counts through this
    for _ in range(2 * mesh_hands.SEARCH_FRAMES):
        assert hands.outlines(FRAME, BOX, track) == []
    assert finder.searches == 2  # the track's first frame, then once in SEARCH_FRAMES
    changed = FRAME.copy()
    changed[60:180, 100:150] = 250  # a cell of the face box changes by far more than CHANGE_LEVELS
    hands.outlines(changed, BOX, track)
    assert finder.searches == 3 and len(told) == 3


def test_a_face_moving_a_pixel_in_its_box_is_no_sudden_change() -> None:
    """The thumbnail's cells are means of (nearly) all their pixels, not of a sparse grid that aliases: a
    face's fine detail (here the extreme, stripes 1 px wide, like lashes or hair) moving a pixel within
    the box, as a moving head does every frame, changes no cell by CHANGE_LEVELS; something coming in
    over a cell does. (The bench's panning face changed its old sparse thumbnail by 33-37 levels every
    22 frames, a palm search each time.)"""
    finder = ScriptedFinder(None)
    hands, track = FaceHands(finder), HandTrack()  # type: ignore[arg-type]
    striped = FRAME.copy()
    striped[:, ::2] = 230
    hands.outlines(striped, BOX, track)
    assert finder.searches == 1
    for step in range(1, 3 * mesh_hands.SEARCH_GAP):
        hands.outlines(np.roll(striped, step % 2, axis=1), BOX, track)
    assert finder.searches == 1
    covered = striped.copy()
    covered[60:180, 100:150] = 40
    hands.outlines(covered, BOX, track)
    assert finder.searches == 2


def test_a_box_sliding_a_few_px_against_the_face_is_no_sudden_change() -> None:
    """At a reduced swap share the face box lags or jitters a few px against the face: a dark feature
    (an eye, the hairline) then moves within its cell and the cell's mean by 40-45 levels. The change
    allows the box a third of a cell's slide; a patch coming in over the face still counts."""
    face = FRAME.copy()
    face[84:96, 120:130] = 0  # an eye: a dark block filling a cell (the box's inner part: 10 x 12 px cells)
    slid = np.roll(face, 3, axis=1)  # the box 3 px off: the eye's cell mean changes by 36 levels
    before, after = FaceHands._thumbnail(face, BOX), FaceHands._thumbnail(slid, BOX)
    assert before is not None and after is not None
    assert float(np.abs(cells(after) - cells(before)).max()) > mesh_hands.CHANGE_LEVELS  # cell by cell
    assert thumbnail_change(after, before) <= mesh_hands.CHANGE_LEVELS
    covered = face.copy()
    covered[120:170, 110:150] = 200  # a pale hand over the lower face
    assert thumbnail_change(FaceHands._thumbnail(covered, BOX), before) > mesh_hands.CHANGE_LEVELS  # type: ignore[arg-type]


def test_a_change_below_the_sudden_level_is_searched_when_it_lasts_not_when_it_flickers() -> None:
    """A hand rising slowly from below the chin changes the bottom cells by 28-32 levels for several
    frames (under CHANGE_LEVELS); the box's jitter against a panning face reaches as far for one check.
    WATCH_FRAMES checks in a row over WATCH_LEVELS start a search, one at a time do not."""
    level = 28
    assert mesh_hands.WATCH_LEVELS < level < mesh_hands.CHANGE_LEVELS
    finder = ScriptedFinder(None)
    hands, track = FaceHands(finder), HandTrack()  # type: ignore[arg-type]
    rising = FRAME.copy()
    rising[156:168, 140:150] += level  # one cell of the box's inner part (10 x 12 px cells from (110, 72))
    assert thumbnail_change(FaceHands._thumbnail(rising, BOX), FaceHands._thumbnail(FRAME, BOX)) > level - 1  # type: ignore[arg-type]
    hands.outlines(FRAME, BOX, track)
    assert finder.searches == 1  # the track's first frame
    for _ in range(mesh_hands.SEARCH_GAP):
        hands.outlines(FRAME, BOX, track)
    for _ in range(3):  # flickering: over the watch level every second check
        hands.outlines(rising, BOX, track)
        hands.outlines(FRAME, BOX, track)
    assert finder.searches == 1
    for _ in range(mesh_hands.WATCH_FRAMES):
        hands.outlines(rising, BOX, track)
    assert finder.searches == 2


def test_a_found_hand_is_followed_then_held_a_bounded_time_then_dropped() -> None:
    # (the scripted landmarks are in the search square's px; the frame's are the same here: a box whose
    # square starts at the frame's corner)
    box = np.array([0.0, 0.0, 60.0, 60.0], np.float32)
    finder = ScriptedFinder(upright_hand())
    hands, track = FaceHands(finder), HandTrack()  # type: ignore[arg-type]
    assert len(hands.outlines(FRAME, box, track)) == HAND_PIECES and finder.searches == 1
    for _ in range(5):
        assert len(hands.outlines(FRAME, box, track)) == HAND_PIECES
    assert finder.searches == 1  # followed by the landmark model alone
    finder.follows = False
    finder.hand = None  # gone: neither followed nor found
    held = [len(hands.outlines(FRAME, box, track)) for _ in range(mesh_hands.HOLD_FRAMES + 2)]
    assert held[: mesh_hands.HOLD_FRAMES] == [HAND_PIECES] * mesh_hands.HOLD_FRAMES and held[-1] == 0
    assert finder.searches > mesh_hands.HOLD_FRAMES  # searched for every frame while held


def test_a_hand_newly_found_needs_a_high_presence_and_a_still_is_searched_every_time() -> None:
    box = np.array([0.0, 0.0, 60.0, 60.0], np.float32)
    doubtful = ScriptedFinder(upright_hand(), presence=0.8)  # a cheek beside a cup reached 0.75
    assert FaceHands(doubtful).outlines(FRAME, box, None) == []  # type: ignore[arg-type]
    assert doubtful.searches == len(mesh_hands.CROP_GROWTHS)  # a still: every square
    sure = ScriptedFinder(upright_hand())
    assert len(FaceHands(sure).outlines(FRAME, box, None)) == HAND_PIECES  # type: ignore[arg-type]


def filled(pieces: list[np.ndarray]) -> np.ndarray:
    inside = np.zeros((240, 320), np.uint8)
    for piece in pieces:
        cv2.fillPoly(inside, [np.round(piece).astype(np.int32)], 1)
    return inside


def test_the_outline_leaves_the_face_between_the_thumb_and_the_fingers() -> None:
    """The thumb spread out to the side: the skin in the crook between it and the index finger is the
    face's, not the hand's (one hull of the whole hand took it, and a hand over 30 % of a face's oval
    counted as half of it); the thumb and the fingers themselves are covered."""
    hand = upright_hand()
    x, y = 150.0, 130.0
    for joint in range(1, 4):  # the thumb's joints, out to the left and up
        hand.points[1 + joint, :2] = (x - 16.0 - 9.0 * joint, y + 5.0 - 6.0 * joint)
    inside = filled(outline(hand))
    tip, index_tip = hand.points[4, :2], hand.points[8, :2]
    crook = (tip + index_tip) / 2.0
    assert inside[int(crook[1]), int(crook[0])] == 0
    for point in hand.points[:, :2]:
        assert inside[round(float(point[1])), round(float(point[0]))] == 1


def test_the_follow_region_holds_the_hand_fingers_up_and_the_outline_covers_its_fingers() -> None:
    hand = upright_hand()
    matrix = roi_matrix(mesh_hands._palm_of(hand), 224)
    crop = hand.points[:, :2] @ matrix[:, :2].T + matrix[:, 2]
    assert (crop > 20).all() and (crop < 204).all()  # all inside, with a margin
    assert crop[12, 1] < crop[0, 1]  # the middle fingertip above the wrist
    assert abs(float(crop[:, 0].mean()) - 112.0) < 30.0
    inside = filled(outline(hand))
    # the outline reaches past the outer fingers by about a finger's half width
    grow = mesh_hands.FINGER_HALF_WIDTH * float(np.linalg.norm(hand.points[9, :2] - hand.points[0, :2]))
    assert inside[130, int(hand.points[1, 0] - 0.8 * grow)] == 1
    assert inside[130, int(hand.points[1, 0] - 2.0 * grow)] == 0
