"""The contract every swap engine meets, so the pipeline never branches on which engine runs."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from gpu_ops.errors import LivefuseError
from models.face import Frame, TrackedFace
from streamer.pipeline.choices import ENGINE_NAMES, EngineName

__all__ = ["ENGINE_NAMES", "EngineName"]  # re-exported: the engines' contract names them


class NoFaceError(LivefuseError):
    """The source image has no usable face."""

    exit_code = 2


class EngineUnavailableError(LivefuseError):
    """The requested engine is not loaded (its model files are missing or did not verify)."""


Part = TypeVar("Part")


class StreamMemory:
    """What engines remember about one stream between its frames (smoothed statistics per face track).

    Owned by the stream's state, so it starts and ends with the stream and two streams never share
    it; each engine keeps one part, keyed by the part's class, and resets it itself (new source, track
    gone). A still image is swapped without memory. Worker thread only, like all per-stream state.
    """

    def __init__(self) -> None:
        self._parts: dict[type, object] = {}

    def part(self, kind: type[Part]) -> Part:
        """This stream's `kind` part, created empty (kind()) on first use."""
        found = self._parts.get(kind)
        if not isinstance(found, kind):
            found = kind()
            self._parts[kind] = found
        return found


@dataclass(frozen=True)
class SwapOptions:
    """Per-stream switches an engine honours on every frame, and the stream's memory between frames."""

    mouth_mask: bool = True  # keep the target's inner mouth (and eyes for mesh) so speech shows
    enhance: bool = False
    occlusion: bool = True  # what stands in front of a target face stays in front (mesh engine)
    memory: StreamMemory | None = field(default=None, compare=False)  # None: every frame stands alone
    # per face, in the faces' order: what the engine's `plan` worked out in the pipeline's track half
    # (MeshEngine: each face's geometry and remap field); None: the swap works everything out itself
    plans: Sequence[Any] | None = field(default=None, compare=False)


class SourceFace(Protocol):
    """Engine-specific identity computed once per source change (texture + mesh, or a latent)."""

    @property
    def engine(self) -> EngineName: ...  # read-only, so frozen dataclasses satisfy the protocol


class SwapEngine(Protocol):
    name: EngineName

    def prepare_source(self, image: Frame) -> SourceFace:
        """Analyse a source photo once; raise NoFaceError when it has no face."""
        ...

    def swap(
        self, frame: Frame, faces: Sequence[TrackedFace], source: SourceFace, options: SwapOptions
    ) -> Frame:
        """Swap every given face in `frame` to `source`; pixels outside the faces' paste boxes stay as they were."""
        ...
