"""Errors of the array layer; `LivefuseError` is the root every package's errors derive from.

It lives here because gpu_ops is the bottom layer: every other package may import it.
"""


class LivefuseError(Exception):
    """Base of every error livefuse raises on purpose."""


class GpuUnavailableError(LivefuseError):
    """CUDA/CuPy was asked for explicitly but cannot be used on this machine."""


class InvalidFrameError(LivefuseError, ValueError):
    """An array does not have the shape, dtype or layout an op requires."""


class InvalidInputError(LivefuseError, ValueError):
    """A user-supplied file or value cannot be used (unreadable, wrong format, too large)."""

    exit_code = 2
