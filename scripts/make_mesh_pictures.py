"""Regenerate docs/images/mesh_*.png: one before/after picture per quality fix of the mesh engine.

Each picture is three panels around the target face: reference | fix off | fix on. "Off" is the same
engine with one MeshConfig switch turned off (the cracks picture uses the classic triangle-by-triangle
warp instead; the edge pictures the single feathered blend; the rim guard picture the engine without
the guard). Only public-domain media is used: NASA's
astronaut portrait, the official Obama and Biden portraits and a frame of the White House Hamilton clip.

    python scripts/make_mesh_pictures.py --models-dir MODELS_DIR --media-dir PHOTOS_DIR
"""

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from numpy.typing import NDArray

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models import face_mesh_topology as topology
from models.detector import Detector
from models.face import Frame, TrackedFace
from models.inference import InferenceConfig
from models.landmarks import Landmarker
from models.model_files import ModelStore
from models.registry import get_spec
from streamer.pipeline.swap_engines.base import SwapOptions
from streamer.pipeline.swap_engines.mesh import MeshConfig, MeshEngine

logger = logging.getLogger("make_mesh_pictures")

PANEL_SIZE = (176, 208)  # w, h of each panel; three panels stay under 150 KB as PNG
MAX_PNG_BYTES = 150_000
HAMILTON_TURNED_FRAME = 210  # Lin-Manuel Miranda turned ~30 degrees


class Pictures:
    def __init__(self, models_dir: Path, media_dir: Path, out_dir: Path) -> None:
        store = ModelStore(models_dir)
        config = InferenceConfig(intra_op_threads=2)
        self.detector = Detector(store.session("yunet_n", config), get_spec("yunet_n"))
        self.landmarker = Landmarker(store.session("facemesh_468", config), get_spec("facemesh_468"))
        self.media_dir = media_dir
        self.out_dir = out_dir

    def load(self, name: str, max_side: int = 720) -> Frame:
        image = cv2.imread(str(self.media_dir / name), cv2.IMREAD_COLOR)
        if image is None:
            raise SystemExit(f"cannot read {self.media_dir / name}")
        scale = min(1.0, max_side / max(image.shape[:2]))
        image = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        return np.ascontiguousarray(cv2.cvtColor(image, cv2.COLOR_BGR2RGB))

    def hamilton_face(self) -> Frame:
        capture = cv2.VideoCapture(str(self.media_dir / "fr_short_hamilton_clip.mp4"))
        capture.set(cv2.CAP_PROP_POS_FRAMES, HAMILTON_TURNED_FRAME)
        ok, frame = capture.read()
        capture.release()
        if not ok:
            raise SystemExit("cannot read the Hamilton clip")
        rgb: Frame = np.ascontiguousarray(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB), dtype=np.uint8)
        x1, y1, x2, y2 = self.face(rgb).box.astype(int)
        side = x2 - x1
        return np.ascontiguousarray(rgb[max(0, y1 - side) : y2 + side, max(0, x1 - side) : x2 + side])

    def face(self, image: Frame) -> TrackedFace:
        detections = self.detector.detect(image)
        areas = (detections.boxes[:, 2] - detections.boxes[:, 0]) * (
            detections.boxes[:, 3] - detections.boxes[:, 1]
        )
        index = int(np.argmax(areas))
        landmarks = self.landmarker.detect(
            image, detections.landmarks_5[index : index + 1], detections.boxes[index : index + 1]
        )
        return TrackedFace(
            0,
            detections.boxes[index],
            float(detections.scores[index]),
            detections.landmarks_5[index],
            landmarks.points[0],
        )

    def swap(
        self, config: MeshConfig, source: Frame, target: Frame, options: SwapOptions | None = None
    ) -> Frame:
        engine = MeshEngine(self.detector, self.landmarker, config)
        prepared = engine.prepare_source(source)
        return engine.swap(target, [self.face(target)], prepared, options or SwapOptions())

    def crop(self, image: Frame, reference: Frame, zoom: float, focus: int | None = None) -> Frame:
        """A panel: `image` cut around the face found in `reference` (the same image, or its original)."""
        mesh = self.face(reference).mesh
        assert mesh is not None
        low, high = mesh[:, :2].min(0), mesh[:, :2].max(0)
        centre, extent = (low + high) / 2, float((high - low).max()) * 1.25 / zoom
        if focus is not None:
            centre = mesh[focus, :2]
        scale = PANEL_SIZE[1] / extent
        matrix = np.array(
            [
                [scale, 0, PANEL_SIZE[0] / 2 - scale * centre[0]],
                [0, scale, PANEL_SIZE[1] / 2 - scale * centre[1]],
            ]
        )
        flags = cv2.INTER_NEAREST if zoom > 1 else cv2.INTER_AREA
        crop = cv2.warpAffine(image, matrix, PANEL_SIZE, flags=flags, borderMode=cv2.BORDER_REPLICATE)
        return np.asarray(crop, np.uint8)

    def save(
        self,
        name: str,
        target: Frame,
        panels: list[Frame],
        zoom: float = 1.0,
        first: Frame | None = None,
        focus: int | None = None,
    ) -> None:
        """Panels cut around the target face; `first` replaces panel 1, cut around its own face."""
        crops = [self.crop(panel, target, zoom, focus) for panel in panels]
        if first is not None:
            crops[0] = self.crop(first, first, zoom)
        separator = np.full((PANEL_SIZE[1], 3, 3), 255, np.uint8)
        picture = np.hstack([part for crop in crops for part in (crop, separator)][:-1])
        path = self.out_dir / name
        ok, encoded = cv2.imencode(
            ".png", cv2.cvtColor(picture, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9]
        )
        assert ok
        if encoded.size > MAX_PNG_BYTES:  # drop the lowest colour bit: invisible, and PNG shrinks a lot
            picture = np.bitwise_and(picture, np.uint8(0xFE))
            ok, encoded = cv2.imencode(
                ".png", cv2.cvtColor(picture, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9]
            )
        path.write_bytes(encoded.tobytes())
        logger.info("wrote %s (%d bytes)", path, encoded.size)


def side_lit(image: Frame, face: TrackedFace) -> Frame:
    """The portrait lit by a warm lamp at the image-right: dark left cheek, bright right cheek."""
    x1, x2 = float(face.box[0]), float(face.box[2])
    columns = np.arange(image.shape[1], dtype=np.float32)
    ramp = np.clip(0.3 + 0.9 * (columns - x1) / (x2 - x1), 0.3, 1.2)[None, :, None]
    tint = np.array([1.0, 0.92, 0.8], np.float32)[None, None, :]
    return np.clip(image.astype(np.float32) * ramp * tint, 0, 255).astype(np.uint8)


def with_microphone(image: Frame, mesh: NDArray[np.float32]) -> Frame:
    """A dark microphone in front of the mouth and chin (a stand-in occluder)."""
    drawn = image.copy()
    chin = mesh[152, :2]
    face_height = float(np.linalg.norm(mesh[10, :2] - mesh[152, :2]))
    radius = int(0.09 * face_height)
    head = (int(chin[0] + 0.1 * face_height), int(chin[1] - 0.1 * face_height))
    cv2.line(drawn, head, (head[0] + radius, head[1] + 6 * radius), (40, 40, 44), int(radius * 0.7))
    cv2.circle(drawn, head, radius, (85, 88, 92), -1)
    cv2.circle(drawn, head, radius, (30, 30, 30), 2)
    return drawn


def with_cheek_band(image: Frame, mesh: NDArray[np.float32]) -> Frame:
    """A dark band (8 % of the face height thick) across the subject's right cheek: hair, a shadow."""
    face_height = float(np.linalg.norm(mesh[10, :2] - mesh[152, :2]))
    direction = np.array([np.cos(np.radians(30)), -np.sin(np.radians(30))])
    start = np.round(mesh[50, :2] - 0.09 * face_height * direction).astype(int)
    end = np.round(mesh[50, :2] + 0.09 * face_height * direction).astype(int)
    drawn = image.copy()
    cv2.line(
        drawn,
        (int(start[0]), int(start[1])),
        (int(end[0]), int(end[1])),
        (38, 30, 26),
        int(0.08 * face_height),
    )
    return drawn


def triangle_by_triangle(engine: MeshEngine, source: Frame, target: Frame, face: TrackedFace) -> Frame:
    """The classic piecewise warp: warpAffine + anti-aliased triangle mask, blended triangle by triangle.

    Edge pixels get a partial weight from each of two neighbours, so the background shows through
    along every shared edge: the 1-pixel cracks.
    """
    prepared = engine.prepare_source(source)
    output = target.copy()
    texture = prepared.texture[..., :3]
    assert face.mesh is not None
    for src, dst in zip(prepared.src_triangles, face.mesh[topology.TRIANGLES, :2], strict=False):
        x, y, w, h = cv2.boundingRect(np.round(dst).astype(np.int32))
        if w < 1 or h < 1 or x < 0 or y < 0 or x + w > target.shape[1] or y + h > target.shape[0]:
            continue
        matrix = cv2.getAffineTransform(src.astype(np.float32), (dst - [x, y]).astype(np.float32))
        patch = cv2.warpAffine(
            texture, matrix, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT_101
        )
        mask = np.zeros((h, w), np.float32)
        cv2.fillConvexPoly(mask, np.round(dst - [x, y]).astype(np.int32), 1.0, cv2.LINE_AA)
        region = output[y : y + h, x : x + w]
        blended = region * (1.0 - mask[..., None]) + patch * mask[..., None]
        region[...] = np.clip(blended + 0.5, 0, 255).astype(np.uint8)
    return output


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--media-dir", type=Path, required=True)
    parser.add_argument(
        "--out-dir", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "images"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    pictures = Pictures(args.models_dir, args.media_dir, args.out_dir)
    default = MeshConfig()
    source_off: Callable[..., MeshConfig] = lambda **changes: dataclasses.replace(
        default, source=dataclasses.replace(default.source, **changes)
    )

    obama, biden, astronaut = (
        pictures.load("fr_obama.jpg"),
        pictures.load("fr_biden.jpg"),
        pictures.load("skimage_astronaut.png"),
    )
    lit = side_lit(astronaut, pictures.face(astronaut))
    pictures.save(
        "mesh_lighting.png",
        lit,
        [
            lit,
            pictures.swap(dataclasses.replace(default, shading="lab"), obama, lit),
            pictures.swap(default, obama, lit),
        ],
    )
    turned = pictures.hamilton_face()
    pictures.save(
        "mesh_turned_source.png",
        obama,
        [
            obama,
            pictures.swap(source_off(cull_back_faces=False, max_source_yaw_degrees=90.0), turned, obama),
            pictures.swap(source_off(max_source_yaw_degrees=90.0), turned, obama),
        ],
        first=turned,
    )
    pictures.save(
        "mesh_lips.png",
        obama,
        [
            obama,
            pictures.swap(dataclasses.replace(default, keep_target_lips=False), biden, obama),
            pictures.swap(default, biden, obama),
        ],
        zoom=2.0,
        focus=topology.UPPER_INNER_LIP,
    )
    face = pictures.face(obama)
    assert face.mesh is not None
    occluded = with_microphone(obama, face.mesh)
    pictures.save(
        "mesh_occluder.png",
        astronaut,
        [
            occluded,
            pictures.swap(source_off(skin_mask=False), occluded, astronaut),
            pictures.swap(default, occluded, astronaut),
        ],
        first=occluded,
    )
    banded = with_cheek_band(obama, face.mesh)
    pictures.save(
        "mesh_cheek_band.png",
        astronaut,
        [
            banded,
            pictures.swap(source_off(skin_mask=False), banded, astronaut),
            pictures.swap(default, banded, astronaut),
        ],
        first=banded,
    )
    feather = dataclasses.replace(default, blend="feather")
    pictures.save(
        "mesh_seam.png",
        biden,
        [biden, pictures.swap(feather, obama, biden), pictures.swap(default, obama, biden)],
        zoom=1.6,
        focus=151,  # the forehead, where the pasted edge crosses bare skin
    )
    pictures.save(
        "mesh_seam_cheek.png",
        astronaut,
        [astronaut, pictures.swap(feather, obama, astronaut), pictures.swap(default, obama, astronaut)],
        zoom=1.6,
        focus=132,  # the cheek's edge beside the jaw
    )
    smiling, bearded = pictures.load("fr_biden2.jpg"), pictures.load("fr_alex_lacamoire1.jpg")
    pictures.save(
        "mesh_rim_guard.png",
        smiling,
        [
            smiling,
            pictures.swap(dataclasses.replace(default, rim_guard=None), bearded, smiling),
            pictures.swap(default, bearded, smiling),
        ],
        zoom=1.6,
        focus=365,  # the jaw beside the chin, where the fitted outline runs past the face
    )
    flat_forehead = source_off(forehead_drop=0.0, forehead_feather=default.source.edge_feather)
    pictures.save(
        "mesh_forehead.png",
        astronaut,
        [astronaut, pictures.swap(flat_forehead, biden, astronaut), pictures.swap(default, biden, astronaut)],
    )
    engine = MeshEngine(pictures.detector, pictures.landmarker, dataclasses.replace(default, shading="none"))
    target_face = pictures.face(astronaut)
    one_remap = engine.swap(astronaut, [target_face], engine.prepare_source(obama), SwapOptions())
    pictures.save(
        "mesh_cracks.png",
        astronaut,
        [astronaut, triangle_by_triangle(engine, obama, astronaut, target_face), one_remap],
        zoom=2.5,
        focus=topology.NOSE_TIP,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
