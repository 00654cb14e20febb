"""A bounded close never breaks aiortc's own close of the same connection (its auto-close when the
client's DTLS went away), whether our wait times out or our caller is cancelled."""

import asyncio
import contextlib

import pytest
from aiortc import RTCPeerConnection

from streamer.transport.peer_close import close_peer


def _slow_to_close() -> RTCPeerConnection:
    pc = RTCPeerConnection()
    transceiver = pc.addTransceiver("video")

    async def slow_stop() -> None:
        await asyncio.sleep(0.2)

    transceiver.stop = slow_stop  # type: ignore[method-assign]
    return pc


async def test_a_close_that_times_out_leaves_the_first_close_to_finish() -> None:
    pc = _slow_to_close()
    aiortc_close = asyncio.ensure_future(pc.close())  # what aiortc starts when DTLS closes
    await asyncio.sleep(0)
    assert await close_peer(pc, timeout_s=0.05) is False
    await aiortc_close  # a plain wait_for would have cancelled its future: InvalidStateError here
    assert pc.connectionState == "closed"


async def test_a_cancelled_closer_leaves_the_first_close_to_finish() -> None:
    pc = _slow_to_close()
    aiortc_close = asyncio.ensure_future(pc.close())
    await asyncio.sleep(0)
    closer = asyncio.ensure_future(close_peer(pc))
    await asyncio.sleep(0.05)
    closer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await closer
    await aiortc_close
    assert pc.connectionState == "closed"


@pytest.mark.parametrize("times", [1, 2])
async def test_close_peer_closes_and_says_so(times: int) -> None:
    pc = _slow_to_close()
    for _ in range(times):
        assert await close_peer(pc) is True
    assert pc.connectionState == "closed"
