"""The real pipeline's capabilities: on the bundled models alone (a fresh clone) the mesh engine runs and
the optional parts say what they need and how to get it; with the dlib embedder present, reference
selection is available and its model loads only when a reference is first used."""

from pathlib import Path

import numpy as np
import pytest

from models.model_files import BUNDLED_MODELS_DIR
from streamer.pipeline.frame_pipeline import REFERENCE_EMBEDDER, FramePipeline
from streamer.pipeline.image_input import read_image_file
from streamer.pipeline.pipeline_settings import PipelineConfig
from streamer.pipeline.swap_engines.base import NoFaceError


def test_bundled_models_alone_run_mesh_and_name_what_the_rest_needs(tmp_path: Path) -> None:
    pipeline = FramePipeline.load(tmp_path, PipelineConfig(execution_provider="cpu"))
    assert pipeline.default_engine == "mesh"
    body = pipeline.capabilities().as_json()
    assert body["engines"]["mesh"]["available"] and body["engines"]["auto"]["available"]
    inswapper = body["engines"]["inswapper"]
    assert not inswapper["available"] and "models fetch inswapper_128" in inswapper["reason"]
    reference = body["features"]["reference"]
    assert not reference["available"] and REFERENCE_EMBEDDER in reference["reason"]
    assert "copy emb_dlib_resnet_v1.onnx into" in reference["reason"]
    assert not body["features"]["enhancer"]["available"]
    assert str(BUNDLED_MODELS_DIR) not in reference["reason"]  # the fix points at the user's directory
    with pytest.raises(NoFaceError, match="copy emb_dlib_resnet_v1.onnx into"):
        pipeline.reference_embedding(np.full((240, 320, 3), 128, dtype=np.uint8))


def test_the_reference_embedder_loads_on_first_use(models_dir: Path, media_dir: Path) -> None:
    pipeline = FramePipeline.load(models_dir, PipelineConfig(execution_provider="cpu"))
    assert pipeline.capabilities().features["reference"].available
    assert REFERENCE_EMBEDDER not in pipeline.providers  # not loaded at start
    embedding = pipeline.reference_embedding(read_image_file(media_dir / "fr_obama.jpg"))
    assert embedding.shape == (128,) and REFERENCE_EMBEDDER in pipeline.providers
