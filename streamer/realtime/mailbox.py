"""A one-slot mailbox between a session's reader (event loop) and the worker thread: the newest frame
wins and every overwritten frame is counted as a drop, so latency cannot grow when processing is slower
than the input (DESIGN.md section 2)."""

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")


class FrameMailbox(Generic[Item]):
    """Thread-safe newest-item slot. `on_put` (called outside the lock) lets a worker wake up."""

    def __init__(self, on_put: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._item: Item | None = None
        self.on_put = on_put  # settable: the worker plugs its wake-up in when the lane attaches
        self.posted = 0
        self.dropped = 0
        self.taken = 0

    def put(self, item: Item) -> bool:
        """Store `item`, replacing an untaken one; returns True when that replacement dropped a frame."""
        with self._lock:
            dropped = self._item is not None
            self._item = item
            self.posted += 1
            if dropped:
                self.dropped += 1
        if self.on_put is not None:
            self.on_put()
        return dropped

    def take(self) -> Item | None:
        """The newest item (emptying the slot), or None when nothing new arrived since the last take."""
        with self._lock:
            item, self._item = self._item, None
            if item is not None:
                self.taken += 1
            return item

    def clear(self) -> None:
        """Forget a pending item without counting it as dropped (session closing)."""
        with self._lock:
            self._item = None
