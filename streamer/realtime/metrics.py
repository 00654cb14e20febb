"""The daemon's metric families, on `prometheus_client` with one registry per daemon (an app, a test, a
soak run each count alone), named once here so every module updates the same ones. Updates are
thread-safe (the worker thread counts while the event loop renders `/metrics`); `render()` answers in the
Prometheus text format, or in OpenMetrics when the scraper's Accept header asks for it.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

# seconds; covers per-stage timings (1 ms) up to a badly late frame (2.5 s)
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.033, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5
)  # fmt: skip
# seconds; the batch deadline is a few ms (serve --batch-wait-ms), so finer than DEFAULT_BUCKETS
BATCH_WAIT_BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.033, 0.1, 0.25)
# seconds since a frame left its decoder: a frame interval (33 ms) apart near the real-time range
FRAME_AGE_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.033, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5
)  # fmt: skip
BATCH_SIZE_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16)
PER_SESSION = ("session_id",)


class DaemonMetrics:
    """One daemon's metric families (prometheus_client's counters, gauges and histograms)."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self.active_sessions = Gauge(
            "livefuse_active_sessions", "Peer sessions currently open", registry=registry
        )
        self.frames_in = Counter(
            "livefuse_frames_in", "Video frames received per session", PER_SESSION, registry=registry
        )
        self.frames_out = Counter(
            "livefuse_frames_out", "Video frames sent per session", PER_SESSION, registry=registry
        )
        self.frames_dropped = Counter(
            "livefuse_frames_dropped",
            "Frames dropped (mailbox or batcher overwrite, full queue)",
            PER_SESSION,
            registry=registry,
        )
        self.stage_seconds = Histogram(
            "livefuse_stage_seconds",
            "Time per processing stage (batch = one pipeline call)",
            ("stage",),
            buckets=DEFAULT_BUCKETS,
            registry=registry,
        )
        self.server_latency_seconds = Histogram(
            "livefuse_frame_latency_seconds",
            "Decoded frame in -> frame taken by the encoder",
            buckets=DEFAULT_BUCKETS,
            registry=registry,
        )
        self.frame_age_seconds = Histogram(
            "livefuse_frame_age_seconds",
            "Age of a frame (since its decoder gave it to the session) as it leaves each stage: mailbox "
            "(the worker took it), batch (its batch started), swap (the pipeline finished), encoder (the "
            "encoder took it); the step between two stages is where it waited",
            ("stage",),
            buckets=FRAME_AGE_BUCKETS,
            registry=registry,
        )
        self.swap_share = Gauge(
            "livefuse_swap_share",
            "Share of each session's frames swapped and sent (1: all; down to 0.25 while the worker cannot "
            "keep up)",
            registry=registry,
        )
        self.client_latency_seconds = Histogram(
            "livefuse_e2e_latency_seconds",
            "Glass-to-glass latency reported by clients from frame stamps",
            buckets=DEFAULT_BUCKETS,
            registry=registry,
        )
        self.batch_size = Histogram(
            "livefuse_batch_size", "Frames per pipeline batch", buckets=BATCH_SIZE_BUCKETS, registry=registry
        )
        self.batches = Counter(
            "livefuse_batches",
            "Batches closed by the micro-batcher, by why (full, all_sessions, deadline)",
            ("reason",),
            registry=registry,
        )
        self.batch_wait_seconds = Histogram(
            "livefuse_batch_wait_seconds",
            "Time a frame waited in the micro-batcher for company before its batch closed",
            buckets=BATCH_WAIT_BUCKETS,
            registry=registry,
        )
        self.batcher_dropped = Counter(
            "livefuse_batcher_dropped",
            "Frames replaced in the micro-batcher by a newer one before they ran (also in frames_dropped)",
            registry=registry,
        )
        self.bus_copies = Counter(
            "livefuse_bus_copies",
            "Frame copies between host and GPU on the device frame path (2 per swapped frame)",
            ("direction",),
            registry=registry,
        )
        self.bus_bytes = Counter(
            "livefuse_bus_bytes", "Bytes of those frame copies", ("direction",), registry=registry
        )
        self.occluded_faces = Counter(
            "livefuse_occluded_faces",
            "Swapped faces with something in front of them (a hand, a microphone): the target kept it there",
            registry=registry,
        )
        self.palm_searches = Counter(
            "livefuse_palm_searches",
            "Palm searches of the hand check (15-25 ms each on a CPU): per face every 60 frames, sooner when "
            "the face's look changes, every frame while a hand is lost",
            registry=registry,
        )
        self.model_info = Gauge(
            "livefuse_model_info",
            "Engine, provider and models in use (value 1)",
            ("key", "value"),
            registry=registry,
        )

    def count_bus_copy(self, direction: str, nbytes: int) -> None:
        """One frame copy across the bus (the device frame path's `BusLedger` listener)."""
        self.bus_copies.labels(direction=direction).inc()
        self.bus_bytes.labels(direction=direction).inc(nbytes)

    def forget_session(self, session_id: str) -> None:
        """Drop a closed session's series, so /metrics does not grow with every call ever made."""
        for metric in (self.frames_in, self.frames_out, self.frames_dropped):
            try:
                metric.remove(session_id)
            except KeyError:  # the session never counted anything on this one
                pass

    def sample(self, name: str, **labels: str) -> float:
        """One sample's value as a scraper would read it (0 when absent): `livefuse_frames_in_total`,
        `livefuse_batch_wait_seconds_count`, ...; for tests, benchmarks and the soak."""
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The /metrics body and its content type: OpenMetrics when `accept` asks for it, else the
        Prometheus text format 0.0.4."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type
