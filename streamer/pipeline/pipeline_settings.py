"""What a pipeline loads (`PipelineConfig`, fixed at start) and what each stream chooses (`SwapSettings`,
changed live through REST or the page), with the flags that set them (streamer/pipeline/config_args.py)
and the validation every change goes through."""

import operator
from dataclasses import dataclass, replace

from streamer.pipeline.choices import (
    ENGINE_CHOICES,
    FACE_SELECTOR_MODES,
    BackendRequest,
    EngineChoice,
    FaceSelectorMode,
)
from streamer.pipeline.config_args import from_flag


@dataclass(frozen=True)
class PipelineConfig:
    """What to load. `engine` is the default for streams whose settings say "auto"."""

    execution_provider: BackendRequest = from_flag("execution_provider", "auto")
    device_id: int = from_flag("device_id", 0)
    detector: str = from_flag("detector", "yunet_n")
    landmarker: str = "facemesh_468"
    engine: EngineChoice = from_flag("engine", "auto")
    swapper_model: str = from_flag("swapper_model", "inswapper_128")
    enhancer_model: str = "gfpgan_1.4"
    detect_every: int = 10  # at most this many frames between detections (faces entering the picture)
    detection_width: int = 320
    intra_op_threads: int = from_flag("intra_op_threads", 0)  # 0: the plan in models/inference.py


@dataclass(frozen=True)
class SwapSettings:
    """Per-stream choices; a new value applies from the next frame."""

    engine: EngineChoice = from_flag("engine", "auto")
    face_selector: FaceSelectorMode = from_flag("face_selector", "many")
    reference_distance: float = from_flag("reference_distance", 0.6)
    enhancer: bool = from_flag("enhancer", False)
    swap_enabled: bool = True
    mouth_mask: bool = from_flag("no_mouth_mask", True, convert=operator.not_)
    occlusion: bool = from_flag("no_occlusion", True, convert=operator.not_)
    # the sender paints frame stamps (streamer/outputs/frame_stamp.py) to measure latency: they come back to
    # it, and the daemon blanks the strip on what others watch (WHEP viewers, /view)
    latency_stamp: bool = False


def settings_with(settings: SwapSettings, **changes: object) -> SwapSettings:
    """A copy with validated changes; ValueError names the bad field (the REST layer maps it to 400)."""
    allowed = {
        "engine": ENGINE_CHOICES,
        "face_selector": FACE_SELECTOR_MODES,
    }
    for key, value in changes.items():
        if key not in SwapSettings.__dataclass_fields__:
            raise ValueError(f"unknown setting {key!r}")
        if key in allowed and value not in allowed[key]:
            raise ValueError(f"{key} must be one of {list(allowed[key])}, got {value!r}")
        if key in ("enhancer", "swap_enabled", "mouth_mask", "occlusion", "latency_stamp") and not isinstance(
            value, bool
        ):
            raise ValueError(f"{key} must be true or false, got {value!r}")
        if key == "reference_distance" and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 4
        ):
            raise ValueError(f"reference_distance must be a number in (0, 4), got {value!r}")
    return replace(settings, **changes)  # type: ignore[arg-type]
