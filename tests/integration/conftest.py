"""Fixtures the integration tests share: the mesh engine on the real YuNet and face-mesh models."""

from pathlib import Path

import pytest

from models.detector import Detector
from models.hands import HandFinder
from models.inference import InferenceConfig
from models.landmarks import Landmarker
from models.model_files import ModelStore
from models.registry import get_spec
from streamer.pipeline.swap_engines.mesh import MeshEngine
from streamer.pipeline.swap_engines.mesh_hands import FaceHands


@pytest.fixture(scope="module")
def engine(models_dir: Path) -> MeshEngine:
    """The mesh engine as the pipeline builds it (2 ORT threads: the quality tests are not timed)."""
    store = ModelStore(models_dir)
    config = InferenceConfig(intra_op_threads=2)
    detector = Detector(store.session("yunet_n", config), get_spec("yunet_n"))
    landmarker = Landmarker(store.session("facemesh_468", config), get_spec("facemesh_468"))
    finder = HandFinder(
        store.session("palm_lite", config),
        get_spec("palm_lite"),
        store.session("hand_landmark_lite", config),
        get_spec("hand_landmark_lite"),
    )
    return MeshEngine(detector, landmarker, hands=FaceHands(finder))
