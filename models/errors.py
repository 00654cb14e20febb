"""Errors raised while finding, verifying, loading and running models."""

from gpu_ops.errors import GpuUnavailableError, LivefuseError

__all__ = [
    "GpuUnavailableError",
    "LivefuseError",
    "ModelChecksumError",
    "ModelContractError",
    "ModelDownloadError",
    "ModelNotFoundError",
    "ModelsDirectoryError",
    "UnknownModelError",
]


class UnknownModelError(LivefuseError, KeyError):
    """A model name that is not in the registry."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "unknown model"


class ModelNotFoundError(LivefuseError):
    """The model file is in none of the searched directories."""

    exit_code = 2  # a set-up mistake the message names the fix for, like bad input


class ModelsDirectoryError(LivefuseError):
    """A models directory the user named (flag or variable) does not exist."""

    exit_code = 2


class ModelChecksumError(LivefuseError):
    """The model file exists but its sha256 (or size) is not the registered one."""


class ModelContractError(LivefuseError):
    """The ONNX session's inputs/outputs do not match the registered IO contract."""


class ModelDownloadError(LivefuseError):
    """A download failed; nothing was left under the final file name."""
