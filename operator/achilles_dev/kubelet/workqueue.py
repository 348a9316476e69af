"""A de-duplicating work queue with delayed items, after client-go's workqueue.

Watch events, process exits and timers (restart back-off, grace periods, deadlines)
all reduce to "look at pod X again", possibly "not before T". One worker drains the
queue, so a pod is never reconciled by two threads at once.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable


class WorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._ready: deque[str] = deque()
        self._queued: set[str] = set()
        self._delayed: list[tuple[float, str]] = []
        self._condition = threading.Condition()

    def add(self, key: str) -> None:
        with self._condition:
            if key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
                self._condition.notify()

    def add_after(self, key: str, delay: float) -> None:
        with self._condition:
            heapq.heappush(self._delayed, (self._clock() + max(0.0, delay), key))
            self._condition.notify()

    def get(self, timeout: float) -> str | None:
        """The next due key, or None if none is due within `timeout` seconds."""
        deadline = self._clock() + timeout
        with self._condition:
            while True:
                now = self._clock()
                while self._delayed and self._delayed[0][0] <= now:
                    _, key = heapq.heappop(self._delayed)
                    if key not in self._queued:
                        self._queued.add(key)
                        self._ready.append(key)
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    return key
                wake = deadline if not self._delayed else min(deadline, self._delayed[0][0])
                if now >= deadline:
                    return None
                self._condition.wait(max(0.0, wake - now))
