"""Which command-line flag sets which config field, declared on the field itself, and the one function that
builds any config dataclass (PipelineConfig, SwapSettings, DaemonConfig) from parsed arguments.

Every subcommand (serve, camera, swap, bench, room) builds its configs with `config_from_args`, so a flag
is wired once, next to the field it sets, and cannot be dropped by one command and kept by another (as
`serve --intra-op-threads` once was). A flag the subcommand does not define, or one left at None, keeps
the field's default; an explicit 0 or empty value is kept as given.

    @dataclass(frozen=True)
    class SwapSettings:
        mouth_mask: bool = from_flag("no_mouth_mask", True, convert=operator.not_)

    settings = config_from_args(SwapSettings, args)
"""

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

Config = TypeVar("Config")
Convert = Callable[[Any], Any]
Read = Callable[[argparse.Namespace], Any]  # a field fed by several flags, or a flag and its variable
ARG_SOURCE = "livefuse.arg_source"  # the dataclass field metadata key
_UNSET = object()


@dataclass(frozen=True)
class ArgSource:
    """Where one config field comes from: the `dests` it reads (argparse names), and how."""

    dests: tuple[str, ...]
    convert: Convert | None = None
    read: Read | None = None

    def value(self, args: argparse.Namespace) -> Any:
        """The field's value from `args`, or _UNSET to keep its default."""
        if self.read is not None:
            value = self.read(args)
            return _UNSET if value is None else value
        value = getattr(args, self.dests[0], None)
        if value is None:
            return _UNSET
        return self.convert(value) if self.convert is not None else value


def from_flag(
    dest: str,
    default: Any = dataclasses.MISSING,
    *,
    convert: Convert | None = None,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field set by the flag whose argparse dest is `dest` (through `convert`, if given)."""
    metadata = {ARG_SOURCE: ArgSource((dest,), convert)}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def from_args(
    read: Read,
    *dests: str,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field computed by `read(args)` from the flags `dests` (None: keep the default)."""
    metadata = {ARG_SOURCE: ArgSource(tuple(dests), read=read)}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def arg_sources(config_type: type) -> dict[str, ArgSource]:
    """field name -> where it comes from, for every field of `config_type` that a flag sets."""
    return {
        field.name: field.metadata[ARG_SOURCE]
        for field in dataclasses.fields(config_type)
        if ARG_SOURCE in field.metadata
    }


def config_from_args(config_type: type[Config], args: argparse.Namespace, **overrides: Any) -> Config:
    """A `config_type` with every flag-set field taken from `args` (checked by its reader or the config
    itself), `overrides` on top (a command's own fixed choices, e.g. detection on every still image)."""
    values: dict[str, Any] = {}
    for name, source in arg_sources(config_type).items():
        value = source.value(args)
        if value is not _UNSET:
            values[name] = value
    values.update(overrides)
    return config_type(**values)
