"""What a call over a bad network got back: the share of frames back, latency percentiles, the longest
gap between frames, and how long the video took to come back after a cut. Read from a PeerClient's
received frames (counter stamps: each names the frame it was, so its send time is known)."""

import itertools
from dataclasses import dataclass

import numpy as np

from bench.clients.peer_client import PeerClient


@dataclass(frozen=True)
class CallQuality:
    sent: int
    received: int
    frames_back: float  # received / sent over the window
    p50_ms: float | None
    p95_ms: float | None
    longest_gap_ms: float  # between two frames received, within the window
    # frames whose stamp is not newer than one already received: the decoder showed stale content (a
    # frame decoded against a lost reference keeps the old picture's stamp strip); not in the latencies
    stale: int = 0
    # after a cut: from the path's return to the first frame received that was sent after it (or whose
    # stamp cannot be read because the daemon sends smaller frames now: a frame of the new video)
    recovery_ms: float | None = None

    def describe(self) -> str:
        def ms(value: float | None) -> str:
            return f"{value:.0f} ms" if value is not None else "-"

        return (
            f"{self.frames_back:.0%} of {self.sent} frames back, p50 {ms(self.p50_ms)}, p95 {ms(self.p95_ms)}, "
            f"longest gap {ms(self.longest_gap_ms)}, back after the cut {ms(self.recovery_ms)}, "
            f"{self.stale} stale"
        )


def call_quality(
    client: PeerClient, since: int, sent_before: int, path_back_ms: float | None = None
) -> CallQuality:
    """The window from index `since` of `client.received` (when `sent_before` frames had been sent)
    to now; `path_back_ms` (the clients' clock, bench.clients.loopback_client.now_ms): when a cut ended."""
    frames = client.received[since:]
    sent = client.track.sent - sent_before
    latencies: list[float] = []
    newest_stamp, stale = -1, 0
    for frame in frames:
        if frame.stamp is None:
            continue
        if frame.stamp <= newest_stamp:
            stale += 1
            continue
        newest_stamp = frame.stamp
        if frame.latency_ms is not None:
            latencies.append(frame.latency_ms)
    arrivals = [frame.received_ms for frame in frames]
    longest_gap_ms = max((b - a for a, b in itertools.pairwise(arrivals)), default=0.0)
    recovery_ms = None
    if path_back_ms is not None:
        for frame in frames:
            if frame.received_ms < path_back_ms:
                continue
            if frame.stamp is None:  # a frame the daemon sent smaller (its stamp strip is cut): new video
                recovery_ms = frame.received_ms - path_back_ms
                break
            sent_ms = client.track.sent_ms.get(frame.stamp)
            if sent_ms is not None and sent_ms >= path_back_ms:
                recovery_ms = frame.received_ms - path_back_ms
                break
    return CallQuality(
        sent=sent,
        received=len(frames),
        frames_back=len(frames) / sent if sent else 0.0,
        p50_ms=float(np.percentile(latencies, 50)) if latencies else None,
        p95_ms=float(np.percentile(latencies, 95)) if latencies else None,
        longest_gap_ms=longest_gap_ms,
        recovery_ms=recovery_ms,
        stale=stale,
    )
