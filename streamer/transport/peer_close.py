"""Closing an RTCPeerConnection with a time bound that cannot break aiortc's own close.

aiortc closes a connection by itself when every DTLS transport has closed (the client vanished), and a
second `close()` awaits the first one's shared future. A plain `wait_for` that times out, or a caller that
is cancelled, cancels that shared future; the first close then fails on it with InvalidStateError and
asyncio logs "Task exception was never retrieved". A shield keeps the waiter's cancellation on our side.
"""

import asyncio

from aiortc import RTCPeerConnection

CLOSE_TIMEOUT_S = 5.0  # bound shutdown even if aiortc's close stalls


async def close_peer(pc: RTCPeerConnection, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
    """Close `pc`, waiting at most `timeout_s`; False when it is still closing then (it goes on alone)."""
    try:
        await asyncio.wait_for(asyncio.shield(pc.close()), timeout_s)
    except TimeoutError:
        return False
    return True
