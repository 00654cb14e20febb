"""The daemon's settings, one frozen value built by `serve` from flags and environment."""

from dataclasses import dataclass, field
from pathlib import Path

from streamer.realtime.frame_conversion import FramePathChoice
from streamer.realtime.micro_batcher import BatchPolicy
from streamer.transport.ice_host_candidates import PortRange
from streamer.transport.ice_servers import IceServerPlan

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
    # NAT traversal and routing behind a proxy (web/network_config.py; docs/deploy.md)
    ice: IceServerPlan = field(default_factory=IceServerPlan)  # --ice-servers, --turn-secret, --turn-ttl
    ice_port_range: PortRange | None = None  # --ice-port-range: host candidates bound only here
    public_address: str | None = None  # --public-address: shown in host candidates (1:1 NAT)
    public_url: str | None = None  # --public-url: absolute base of Location headers; None: paths

    def location(self, path: str) -> str:
        """A `Location` for `path` (/api/sessions/ID, /whip/ID...): under --public-url when set, so a
        call's later requests reach this daemon behind a proxy; else the path as it is."""
        return f"{self.public_url}{path}" if self.public_url else path
