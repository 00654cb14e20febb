"""The daemon's settings, one frozen value built by `serve` from flags and environment."""

from dataclasses import dataclass, field
from pathlib import Path

from streamer.realtime.frame_conversion import FramePathChoice
from streamer.realtime.micro_batcher import BatchPolicy

STATIC_DIR = Path(__file__).resolve().parent / "static"


@dataclass(frozen=True)
class DaemonConfig:
    max_sessions: int = 8
    ice_addresses: tuple[str, ...] = ()  # empty: aioice's own choice of host addresses
    idle_timeout_s: float = 5.0  # a peer that sends no video this long is gone
    max_upload_bytes: int = 20 * 1024 * 1024
    static_dir: Path = field(default=STATIC_DIR)
    # hardening (web/auth.py, web/limits.py, streamer/outputs/provenance.py; docs/security.md)
    token: str | None = None  # bearer token required on every non-public route
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers at all
    rate_limit_per_minute: float = 0.0  # session creations per client address; 0: unlimited
    max_upload_pixels: int = 40_000_000
    label: str | None = None  # drawn bottom-right on swapped frames
    drain_timeout_s: float = 10.0  # SIGTERM: open sessions closed within this
    default_source: Path | None = None  # serve --source: the face set on every new WHIP stream
    batch_policy: BatchPolicy = field(default_factory=BatchPolicy)  # serve --batch-wait-ms
    frame_path: FramePathChoice = "auto"  # serve --frame-path
