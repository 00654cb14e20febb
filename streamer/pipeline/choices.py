"""The allowed values of every choice a user makes (engine, face selector, provider, frame path, models),
as `Literal` types with their tuples from `get_args`: the one source the code, the REST validation and the
command line's `choices=` all derive from (FaceFusion's choices.py habit). Cheap to import: `run_stream.py`
builds its parser from it before any subcommand loads its stack.
"""

from typing import Literal, get_args

from models.registry import MODELS, Role

EngineName = Literal["mesh", "inswapper"]
ENGINE_NAMES: tuple[EngineName, ...] = get_args(EngineName)
EngineChoice = Literal["auto", EngineName]  # auto: inswapper when its files verify, else mesh
ENGINE_CHOICES: tuple[EngineChoice, ...] = get_args(EngineChoice)

FaceSelectorMode = Literal["many", "one", "reference"]
FACE_SELECTOR_MODES: tuple[FaceSelectorMode, ...] = get_args(FaceSelectorMode)

BackendRequest = Literal["auto", "cpu", "cuda", "tensorrt"]  # --execution-provider
BACKEND_REQUESTS: tuple[BackendRequest, ...] = get_args(BackendRequest)

FramePathChoice = Literal["auto", "host", "device"]  # --frame-path
FRAME_PATH_CHOICES: tuple[FramePathChoice, ...] = get_args(FramePathChoice)


def model_names(role: Role) -> tuple[str, ...]:
    """The registered models of one role (--detector, --swapper-model), in registry order."""
    return tuple(spec.name for spec in MODELS.values() if spec.role == role)
