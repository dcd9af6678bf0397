"""A bounded queue that never blocks the producer: when full, the oldest item goes.

ROS callbacks put into it and return at once; a worker thread drains it. Counting what
was dropped turns back-pressure into a number the node reports instead of latency on the
robot's side of the graph.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Optional


class DropOldestQueue:
    def __init__(self, maxlen: int):
        if maxlen < 1:
            raise ValueError(f"queue size must be >= 1, got {maxlen}")
        self._items: deque = deque()
        self._maxlen = maxlen
        self._cond = threading.Condition()
        self._closed = False
        self.dropped = 0
        self.put_count = 0

    def put(self, item: Any) -> bool:
        """Append; return False (and count a drop) when the oldest item had to go."""
        with self._cond:
            if self._closed:
                return False
            self.put_count += 1
            full = len(self._items) >= self._maxlen
            if full:
                self._items.popleft()
                self.dropped += 1
            self._items.append(item)
            self._cond.notify()
            return not full

    def get(self, timeout: Optional[float] = None):
        """Next item, or None when closed and drained (or on timeout)."""
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait(timeout)
            return self._items.popleft() if self._items else None

    def close(self) -> None:
        """Refuse new items; get() returns what is left, then None."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._items)
