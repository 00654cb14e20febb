"""The daemon's settings, one frozen value; each field names the `serve` flag (and variable) that sets it,
checked on the way in, so `config_from_args(DaemonConfig, args)` is all `serve` needs."""

import argparse
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpu_ops.errors import InvalidInputError
from streamer.outputs.provenance import check_label
from streamer.pipeline.choices import FramePathChoice
from streamer.pipeline.config_args import from_args, from_flag
from streamer.realtime.micro_batcher import BatchPolicy
from streamer.transport.ice_host_candidates import PortRange
from streamer.transport.ice_servers import IceServerPlan
from web.client_address import TrustedProxies
from web.network_config import (
    read_ice_port_range,
    read_ice_servers,
    read_public_address,
    read_public_url,
    read_trusted_proxies,
)

STATIC_DIR = Path(__file__).resolve().parent / "static"
TOKEN_ENV = "LIVEFUSE_TOKEN"
MEBIBYTE = 1024 * 1024
Convert = Callable[[float], float]


def _read_token(args: argparse.Namespace) -> str | None:
    """--token, else $LIVEFUSE_TOKEN (which keeps it out of `ps`); blank is no token."""
    return getattr(args, "token", None) or os.environ.get(TOKEN_ENV) or None


def _positive(flag: str, scale: float = 1.0) -> Convert:
    def convert(value: float) -> float:
        if not math.isfinite(value) or value <= 0:
            raise InvalidInputError(f"{flag} must be a number > 0, got {value}")
        return value * scale

    return convert


def _whole_positive(flag: str, scale: float) -> Callable[[float], int]:
    check = _positive(flag, scale)
    return lambda value: round(check(value))


def _at_least_one(value: int) -> int:
    if value < 1:
        raise InvalidInputError(f"--max-sessions must be at least 1, got {value}")
    return value


def _not_negative(flag: str) -> Convert:
    def convert(value: float) -> float:
        if not math.isfinite(value) or value < 0:
            raise InvalidInputError(f"{flag} must be a number >= 0, got {value}")
        return value

    return convert


def batch_policy_for(wait_ms: float) -> BatchPolicy:
    """`--batch-wait-ms`, checked before the server starts (a NaN deadline would never close a batch)."""
    return BatchPolicy(max_wait_ms=_not_negative("--batch-wait-ms")(wait_ms))


def _existing_file(flag: str) -> Callable[[str], Path]:
    """`--source FACE.jpg`, `--reference-face ME.jpg` checked before the server starts."""

    def convert(text: str) -> Path:
        path = Path(text)
        if not path.is_file():
            raise InvalidInputError(f"{flag} {text}: no such file")
        return path

    return convert


@dataclass(frozen=True)
class DaemonConfig:
    max_sessions: int = from_flag("max_sessions", 8, convert=_at_least_one)
    ice_addresses: tuple[str, ...] = from_flag("ice_address", (), convert=tuple)  # empty: aioice's choice
    idle_timeout_s: float = from_flag("idle_timeout", 5.0, convert=_positive("--idle-timeout"))
    max_upload_bytes: int = from_flag(
        "max_upload_mb", 20 * MEBIBYTE, convert=_whole_positive("--max-upload-mb", MEBIBYTE)
    )
    static_dir: Path = field(default=STATIC_DIR)
    # hardening (web/auth.py, web/limits.py, streamer/outputs/provenance.py; docs/security.md)
    token: str | None = from_args(_read_token, "token", default=None)  # bearer token on non-public routes
    cors_origins: tuple[str, ...] = from_flag("cors_origin", (), convert=tuple)  # empty: no CORS headers
    # session creations per client address per minute; 0: unlimited
    rate_limit_per_minute: float = from_flag("rate_limit", 0.0, convert=_not_negative("--rate-limit"))
    max_upload_pixels: int = from_flag(
        "max_upload_megapixels", 40_000_000, convert=_whole_positive("--max-upload-megapixels", 1e6)
    )
    label: str | None = from_flag("label", None, convert=check_label)  # drawn bottom-right on swapped frames
    # SIGTERM: open sessions closed within this
    drain_timeout_s: float = from_flag("drain_timeout", 10.0, convert=_not_negative("--drain-timeout"))
    # serve --source: the face set on every new WHIP stream
    default_source: Path | None = from_flag("source", None, convert=_existing_file("--source"))
    # serve --reference-face: the face to swap on every new WHIP stream (with --face-selector reference)
    default_reference: Path | None = from_flag(
        "reference_face", None, convert=_existing_file("--reference-face")
    )
    batch_policy: BatchPolicy = from_flag(
        "batch_wait_ms", default_factory=BatchPolicy, convert=batch_policy_for
    )
    frame_path: FramePathChoice = from_flag("frame_path", "auto")
    # NAT traversal and routing behind a proxy (web/network_config.py; docs/deploy.md)
    ice: IceServerPlan = from_args(
        read_ice_servers, "ice_servers", "turn_secret", "turn_ttl", default_factory=IceServerPlan
    )
    # --ice-port-range: host candidates bound only here
    ice_port_range: PortRange | None = from_args(read_ice_port_range, "ice_port_range", default=None)
    # --public-address: shown in host candidates (1:1 NAT)
    public_address: str | None = from_args(read_public_address, "public_address", default=None)
    # --public-url: absolute base of Location headers; None: paths
    public_url: str | None = from_args(read_public_url, "public_url", default=None)
    # --trusted-proxies: whose X-Forwarded-For / Forwarded name the client (web/client_address.py)
    trusted_proxies: TrustedProxies = from_args(
        read_trusted_proxies, "trusted_proxies", default_factory=TrustedProxies
    )

    def location(self, path: str) -> str:
        """A `Location` for `path` (/api/sessions/ID, /whip/ID...): under --public-url when set, so a
        call's later requests reach this daemon behind a proxy; else the path as it is."""
        return f"{self.public_url}{path}" if self.public_url else path
