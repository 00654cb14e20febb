"""The registry's rows are internally consistent (the real files are checked in tests/integration)."""

import re

import pytest

from models.errors import UnknownModelError
from models.registry import MODELS, ROLES, ModelSpec, get_spec, names_for_role

SPECS = list(MODELS.values())
SPEC_IDS = [spec.name for spec in SPECS]


def test_names_and_file_names_are_unique() -> None:
    assert len({spec.file_name for spec in SPECS}) == len(SPECS)
    assert all(name == spec.name for name, spec in MODELS.items())


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_hash_and_size_are_well_formed(spec: ModelSpec) -> None:
    if spec.sha256 is not None:
        assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256)
        assert spec.size_bytes is not None and spec.size_bytes > 0
    assert spec.file_name.endswith(".onnx")


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_urls_are_https_and_end_in_a_model_file(spec: ModelSpec) -> None:
    for url in spec.urls:
        assert url.startswith("https://")
        assert url.endswith(".onnx")


def test_every_hashless_row_can_be_fetched() -> None:
    # without a registered hash the first download pins it, so there must be somewhere to download from
    assert all(spec.urls for spec in SPECS if spec.sha256 is None)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_contract_fields_agree(spec: ModelSpec) -> None:
    assert spec.role in ROLES
    assert spec.inputs and spec.outputs
    assert spec.decoder
    assert len(spec.mean) == len(spec.std) == 3
    assert all(value > 0 for value in spec.std)
    if spec.template is not None:
        assert len(spec.template) == 5
    if spec.input_size is not None:
        width, height = spec.input_size
        first_input = spec.inputs[0].shape
        spatial = first_input[1:3] if spec.layout == "nhwc" else first_input[2:4]
        assert spatial == (height, width)


def test_alignment_templates_are_in_insightface_order() -> None:
    for spec in SPECS:
        if spec.template is None:
            continue
        left_eye, right_eye, nose, mouth_left, mouth_right = spec.template
        assert left_eye[0] < nose[0] < right_eye[0], spec.name
        assert mouth_left[0] < mouth_right[0], spec.name
        assert max(left_eye[1], right_eye[1]) < nose[1] < min(mouth_left[1], mouth_right[1]), spec.name


def test_templates_fit_inside_the_crop() -> None:
    for spec in SPECS:
        if spec.template is None or spec.input_size is None:
            continue
        width, height = spec.input_size
        assert all(0 < x < width and 0 < y < height for x, y in spec.template), spec.name


def test_offline_default_set_is_permissive() -> None:
    for name in ("yunet_n", "facemesh_468", "dlib_resnet_128"):
        spec = get_spec(name)
        assert spec.commercial_use and spec.sha256 is not None, name


def test_get_spec_unknown_lists_known_names() -> None:
    with pytest.raises(UnknownModelError) as caught:
        get_spec("inswapper_256")
    assert "inswapper_128" in str(caught.value)
    assert isinstance(caught.value, KeyError)


def test_names_for_role_keeps_registry_order() -> None:
    assert names_for_role("swapper") == ["inswapper_128", "inswapper_128_fp16"]
    assert set(names_for_role("detector")) >= {"yunet_n", "scrfd_500m", "retinaface_mnet025"}
    assert sum(len(names_for_role(role)) for role in ROLES) == len(SPECS)
