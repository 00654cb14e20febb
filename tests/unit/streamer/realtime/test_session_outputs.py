"""SessionOutputs without a network: newest-frame fan-out, a slow consumer never holds the session or
the other consumers back, the received audio is drained with nobody watching, close() ends every reader."""

import asyncio
import fractions

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


async def test_slow_consumer_gets_newest_frames_and_never_holds_back_the_fast_one() -> None:
    outputs = SessionOutputs("s1")
    fast, slow = outputs.subscribe_video(), outputs.subscribe_video()
    fast_pts: list[int] = []
    slow_pts: list[int] = []

    async def consume(track: MediaStreamTrack, into: list[int], delay_s: float) -> None:
        try:
            while True:
                frame = await track.recv()
                into.append(int(frame.pts or 0))
                await asyncio.sleep(delay_s)
        except MediaStreamError:
            pass

    readers = [
        asyncio.create_task(consume(fast, fast_pts, 0.0)),
        asyncio.create_task(consume(slow, slow_pts, 0.05)),
    ]
    await asyncio.sleep(0.01)  # both subscribed: the relay runs
    for index in range(60):
        outputs.push_video(video_frame(index))  # never blocks: no await in the session's path
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.06)
    await outputs.close()
    await asyncio.wait_for(asyncio.gather(*readers), 2)

    assert fast_pts == sorted(fast_pts) and slow_pts == sorted(slow_pts)
    assert len(fast_pts) >= 55, f"the fast consumer lost frames: {len(fast_pts)}"
    assert len(slow_pts) < 15, "the slow consumer was fed every frame (a queue, not newest-frame)"
    assert slow_pts[-1] >= 57 * 3000, "the slow consumer did not get the newest frame"


async def test_received_audio_is_drained_without_viewers_and_reaches_a_viewer() -> None:
    outputs = SessionOutputs("s2")
    received = QueueAudioTrack()
    own_copy = outputs.attach_audio(received)
    assert own_copy is not received and own_copy.kind == "audio" and outputs.has_audio
    for index in range(200):
        received.queue.put_nowait(audio_frame(index))
    await asyncio.sleep(0.05)
    assert received.queue.qsize() == 0, "nobody reads the received audio: its queue grows"

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
