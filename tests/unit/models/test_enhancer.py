"""models/enhancer.py: GFPGAN crops on the FFHQ template, [-1,1] decoding, batched, pasted back in place."""

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from numpy.typing import NDArray

from models.batch_conversion import convert_to_dynamic_batch
from models.enhancer import Enhancer, postprocess_enhanced
from models.errors import ModelContractError
from models.registry import FFHQ_512_TEMPLATE, get_spec
from tests import synthetic_models

SPEC = get_spec("gfpgan_1.4")


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def smooth_frame(height: int = 240, width: int = 320) -> NDArray[np.uint8]:
    """Low-frequency colours: resampling it twice changes nothing beyond rounding."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    red = 60 + 0.4 * x + 20 * np.sin(x / 23)
    green = 40 + 0.5 * y + 20 * np.cos(y / 19)
    blue = 128 + 50 * np.sin((x + y) / 41)
    return np.ascontiguousarray(np.rint(np.stack([red, green, blue], -1)).clip(0, 255).astype(np.uint8))


def face_points(scale: float, centre: tuple[float, float]) -> NDArray[np.float32]:
    """5 points of a face whose FFHQ-512 crop is `scale` frame px per crop px, centred near `centre`."""
    template = np.asarray(FFHQ_512_TEMPLATE, np.float32)
    return ((template - 256.0) * scale + np.asarray(centre, np.float32)).astype(np.float32)


@pytest.fixture
def gfpgan(tmp_path: Path) -> Path:
    return synthetic_models.build_gfpgan(tmp_path / "gfpgan_1.4.onnx")


def test_postprocess_enhanced_maps_minus_one_to_one_onto_bytes() -> None:
    output = np.array([-1.0, -2.0, 0.0, 1.0, 3.0, 0.5], np.float32).reshape(1, 3, 1, 2)
    crops = postprocess_enhanced(output)
    assert crops.shape == (1, 1, 2, 3) and crops.dtype == np.uint8
    assert crops[0, 0].T.ravel().tolist() == [0, 0, 128, 255, 255, 191]


def test_identity_enhancer_leaves_a_smooth_face_within_two_levels(gfpgan: Path) -> None:
    enhancer = Enhancer(_session(gfpgan), SPEC)
    frame = smooth_frame()
    original = frame.copy()
    boxes = enhancer.enhance_faces([frame], np.array([0]), face_points(0.3, (160, 120))[None])
    assert len(boxes) == 1
    x1, y1, x2, y2 = boxes[0]
    assert 0 <= x1 < x2 <= 320 and 0 <= y1 < y2 <= 240
    difference = np.abs(frame.astype(int) - original.astype(int))
    assert difference.max() <= 2
    outside = np.ones(frame.shape[:2], bool)
    outside[y1:y2, x1:x2] = False
    assert np.array_equal(frame[outside], original[outside])


def test_restored_pixels_replace_the_face_only_inside_its_box(gfpgan: Path) -> None:
    enhancer = Enhancer(_session(gfpgan), SPEC)
    enhancer.forward = lambda batch: -batch  # type: ignore[method-assign]  # a "restorer" that inverts
    frame = smooth_frame()
    original = frame.copy()
    (box,) = enhancer.enhance_faces([frame], np.array([0]), face_points(0.3, (160, 120))[None])
    x1, y1, x2, y2 = box
    assert abs(int(frame[120, 160, 0]) - (255 - int(original[120, 160, 0]))) <= 2  # face centre inverted
    outside = np.ones(frame.shape[:2], bool)
    outside[y1:y2, x1:x2] = False
    assert np.array_equal(frame[outside], original[outside])
    half = smooth_frame()
    enhancer.enhance_faces([half], np.array([0]), face_points(0.3, (160, 120))[None], blend=0.5)
    expected_half = (int(original[120, 160, 0]) + 255 - int(original[120, 160, 0])) / 2
    assert abs(int(half[120, 160, 0]) - expected_half) <= 2


def _invert_and_record(enhancer: Enhancer, calls: list[int]) -> None:
    """Make the identity look-alike visibly change faces (output = -input) and record batch sizes."""
    forward = enhancer.forward

    def inverted(batch: NDArray[np.float32]) -> NDArray[np.float32]:
        calls.append(len(batch))
        return -forward(batch)

    enhancer.forward = inverted  # type: ignore[method-assign]


def test_batched_copy_runs_all_faces_of_all_frames_in_one_call(gfpgan: Path, tmp_path: Path) -> None:
    batched = Enhancer(_session(convert_to_dynamic_batch(gfpgan, tmp_path)), SPEC)
    single = Enhancer(_session(gfpgan), SPEC)
    assert batched.supports_batch and not single.supports_batch
    batched_calls: list[int] = []
    single_calls: list[int] = []
    _invert_and_record(batched, batched_calls)
    _invert_and_record(single, single_calls)
    faces = np.stack(
        [face_points(0.3, (100, 120)), face_points(0.25, (220, 110)), face_points(0.3, (160, 120))]
    )
    frame_index = np.array([0, 0, 1])
    together = [smooth_frame(), smooth_frame()]
    batched.enhance_faces(together, frame_index, faces)
    one_by_one = [smooth_frame(), smooth_frame()]
    for index, points in zip(frame_index, faces):
        single.enhance_faces(one_by_one, np.array([index]), points[None])
    assert batched_calls == [3] and single_calls == [1, 1, 1]
    assert not np.array_equal(together[0], smooth_frame())  # something really happened
    # overlapping faces are pasted in the same order either way, so the results agree exactly
    for batched_frame, single_frame in zip(together, one_by_one):
        assert np.array_equal(batched_frame, single_frame)


def test_no_faces_or_zero_blend_changes_nothing(gfpgan: Path) -> None:
    enhancer = Enhancer(_session(gfpgan), SPEC)
    frame = smooth_frame()
    assert enhancer.enhance_faces([frame], np.zeros(0, np.intp), np.zeros((0, 5, 2), np.float32)) == []
    assert enhancer.enhance_faces([frame], np.array([0]), face_points(0.3, (160, 120))[None], blend=0.0) == []
    assert np.array_equal(frame, smooth_frame())
    with pytest.raises(ModelContractError, match="blend"):
        enhancer.enhance_faces([frame], np.array([0]), face_points(0.3, (160, 120))[None], blend=1.5)


def test_wrong_model_is_a_contract_error(tmp_path: Path) -> None:
    swapper = synthetic_models.build_inswapper(tmp_path / "inswapper.onnx")
    with pytest.raises(ModelContractError):
        Enhancer(_session(swapper), SPEC)
