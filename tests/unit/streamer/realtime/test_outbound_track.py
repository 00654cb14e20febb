import asyncio
import fractions
import time

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError

from streamer.realtime.outbound_track import OutboundTrack


def _frame(pts: int) -> av.VideoFrame:
    frame = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
    frame.pts = pts
    frame.time_base = fractions.Fraction(1, 90000)
    return frame


async def test_one_slot_the_newest_frame_wins() -> None:
    """A frame the encoder has not taken yet is replaced by a newer one: nothing queues behind it."""
    track = OutboundTrack()
    for pts in (0, 3000, 6000, 9000):
        assert track.push(_frame(pts))
    assert track.dropped == 3 and track.max_waiting == 1
    frame = await track.recv()
    assert frame.pts == 9000 and frame.time_base == fractions.Fraction(1, 90000)
    track.push(_frame(12000))
    assert (await track.recv()).pts == 12000 and track.dropped == 3


async def test_more_slots_keep_the_newest_in_order() -> None:
    track = OutboundTrack(slots=2)
    for pts in (0, 3000, 6000):
        track.push(_frame(pts))
    assert track.dropped == 1 and track.max_waiting == 2
    assert [(await track.recv()).pts, (await track.recv()).pts] == [3000, 6000]
    with pytest.raises(ValueError):
        OutboundTrack(slots=0)


async def test_late_older_frame_is_dropped_not_reordered() -> None:
    track = OutboundTrack()
    assert track.push(_frame(6000))
    assert not track.push(_frame(3000))
    assert track.dropped == 1 and (await track.recv()).pts == 6000


async def test_recv_waits_for_a_push_and_reports_sent() -> None:
    sent: list[tuple[int, float]] = []
    track = OutboundTrack(on_sent=lambda frame, age_s: sent.append((int(frame.pts or 0), age_s)))
    waiter = asyncio.create_task(track.recv())
    await asyncio.sleep(0)
    assert not waiter.done()
    track.push(_frame(42), born_at=time.monotonic() - 0.5)  # read from its decoder half a second ago
    assert (await asyncio.wait_for(waiter, 1)).pts == 42
    assert track.sent == 1 and len(sent) == 1
    pts, age_s = sent[0]
    assert pts == 42 and 0.5 <= age_s < 5.0


async def test_stop_ends_a_waiting_recv() -> None:
    track = OutboundTrack()
    waiter = asyncio.create_task(track.recv())
    await asyncio.sleep(0)
    track.stop()
    with pytest.raises(MediaStreamError):
        await asyncio.wait_for(waiter, 1)
    assert not track.push(_frame(1))
