import asyncio
import fractions

import av
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError

from streamer.realtime.swapped_track import SwappedTrack


def _frame(pts: int) -> av.VideoFrame:
    frame = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
    frame.pts = pts
    frame.time_base = fractions.Fraction(1, 90000)
    return frame


async def test_keeps_at_most_two_frames_newest_last() -> None:
    track = SwappedTrack()
    for pts in (0, 3000, 6000, 9000):
        track.push(_frame(pts))
    assert track.dropped == 2
    first, second = await track.recv(), await track.recv()
    assert (first.pts, second.pts) == (6000, 9000)
    assert first.time_base == fractions.Fraction(1, 90000)


async def test_late_older_frame_is_dropped_not_reordered() -> None:
    track = SwappedTrack()
    assert track.push(_frame(6000))
    assert not track.push(_frame(3000))
    assert track.dropped == 1 and (await track.recv()).pts == 6000


async def test_recv_waits_for_a_push_and_reports_sent() -> None:
    sent: list[int] = []
    track = SwappedTrack(on_sent=lambda frame: sent.append(int(frame.pts or 0)))
    waiter = asyncio.create_task(track.recv())
    await asyncio.sleep(0)
    assert not waiter.done()
    track.push(_frame(42))
    assert (await asyncio.wait_for(waiter, 1)).pts == 42
    assert sent == [42] and track.sent == 1


async def test_stop_ends_a_waiting_recv() -> None:
    track = SwappedTrack()
    waiter = asyncio.create_task(track.recv())
    await asyncio.sleep(0)
    track.stop()
    with pytest.raises(MediaStreamError):
        await asyncio.wait_for(waiter, 1)
    assert not track.push(_frame(1))
