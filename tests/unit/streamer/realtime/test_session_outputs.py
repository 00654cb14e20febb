"""SessionOutputs without a network: newest-frame fan-out, a slow consumer never holds the session or
the other consumers back, the received audio is drained with nobody watching, close() ends every reader."""

import asyncio
import contextlib
import fractions
from collections.abc import Callable

import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame, VideoFrame

from streamer.realtime.session_outputs import SessionOutputs, ViewerLimitError

CLOCK = fractions.Fraction(1, 90000)


def video_frame(index: int) -> VideoFrame:
    frame = VideoFrame.from_ndarray(np.full((48, 64, 3), index % 256, dtype=np.uint8), format="rgb24")
    frame.pts, frame.time_base = index * 3000, CLOCK
    return frame


class QueueAudioTrack(MediaStreamTrack):
    """A received-audio stand-in: frames put into an unbounded queue, like aiortc's receiver."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self.queue: asyncio.Queue[AudioFrame] = asyncio.Queue()

    async def recv(self) -> AudioFrame:
        return await self.queue.get()


def audio_frame(index: int) -> AudioFrame:
    frame = AudioFrame(format="s16", layout="mono", samples=960)
    frame.sample_rate, frame.pts, frame.time_base = 48000, index * 960, fractions.Fraction(1, 48000)
    return frame


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll state that changes without an event (a queue drained by a task)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_slow_consumer_gets_newest_frames_and_never_holds_back_the_fast_one() -> None:
    """The slow consumer reads one frame, then stops reading while 59 more are pushed: the fast one
    gets every one of them meanwhile, and the slow one's next read is the newest frame, not frame 1."""
    outputs = SessionOutputs("s1")
    fast, slow = outputs.subscribe_video(), outputs.subscribe_video()
    fast_pts: asyncio.Queue[int] = asyncio.Queue()
    slow_pts: list[int] = []
    slow_may_read = asyncio.Event()

    async def consume_fast() -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                fast_pts.put_nowait(int((await fast.recv()).pts or 0))

    async def consume_slow() -> None:
        with contextlib.suppress(MediaStreamError):
            slow_pts.append(int((await slow.recv()).pts or 0))
            await slow_may_read.wait()  # a stalled viewer: reads nothing for a while
            while True:
                slow_pts.append(int((await slow.recv()).pts or 0))

    readers = [asyncio.create_task(consume_fast()), asyncio.create_task(consume_slow())]
    await asyncio.sleep(0)  # one loop turn: both readers are inside recv(), subscribed to the relay
    for index in range(60):
        outputs.push_video(video_frame(index))  # never blocks: no await in the session's path
        assert await asyncio.wait_for(fast_pts.get(), 2) == index * 3000, "the fast consumer lost a frame"
    assert slow_pts == [0]
    slow_may_read.set()
    await _until(lambda: len(slow_pts) == 2)
    await outputs.close()
    await asyncio.wait_for(asyncio.gather(*readers), 2)
    assert slow_pts == [0, 59 * 3000], "the slow consumer was fed a queue, not the newest frame"


async def test_received_audio_is_drained_without_viewers_and_reaches_a_viewer() -> None:
    outputs = SessionOutputs("s2")
    received = QueueAudioTrack()
    own_copy = outputs.attach_audio(received)
    assert own_copy is not received and own_copy.kind == "audio" and outputs.has_audio
    for index in range(200):
        received.queue.put_nowait(audio_frame(index))
    await _until(lambda: received.queue.qsize() == 0)  # nobody reads the received audio: drained anyway

    viewer = outputs.subscribe_audio()
    assert viewer is not None
    first = await asyncio.wait_for(viewer.recv(), 1)
    assert first.pts is not None and first.pts >= 198 * 960, (
        "a new viewer starts with stale audio"
    )  # at most the queue of 2
    pending = asyncio.create_task(viewer.recv())
    await asyncio.sleep(0.01)
    received.queue.put_nowait(audio_frame(200))
    frames = [await asyncio.wait_for(pending, 1)]
    while frames[-1].pts != 200 * 960:
        frames.append(await asyncio.wait_for(viewer.recv(), 1))
    assert len(frames) <= 2

    await outputs.close()
    with pytest.raises(MediaStreamError):
        await asyncio.wait_for(viewer.recv(), 1)


async def test_close_ends_readers_and_refuses_new_viewers() -> None:
    outputs = SessionOutputs("s3", max_viewers=0)
    reader = outputs.subscribe_video()
    waiting = asyncio.create_task(reader.recv())
    await asyncio.sleep(0.01)
    await outputs.close()
    with pytest.raises(MediaStreamError):
        await asyncio.wait_for(waiting, 1)
    with pytest.raises(ViewerLimitError):
        await outputs.add_viewer(None)  # type: ignore[arg-type]  # refused before the offer is read
    await outputs.close()  # idempotent
    outputs.push_video(video_frame(1))  # ignored after close
    assert outputs.viewer_count == 0
