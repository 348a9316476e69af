"""A workqueue as controller-runtime has one (client-go's `workqueue`): items keyed by
object, the newest item of a key replacing the one still waiting, a key handled by one
thread at a time, and a failed key added again after a per-key exponential backoff
(`add_rate_limited`, client-go's ItemExponentialFailureRateLimiter: 1 s, doubling to
60 s, until `forget`); `process` is a worker thread's loop over it.

A key waits at most once however many items came for it (the newest wins: each carries
the whole object, or says to read it afresh; `merge` may keep what the waiting one asked
for beyond that), so the queue is bounded by the number of objects, not the number of
events. Why the Agent events go through one, rather than
stay on kopf's per-object workers, is handlers/agents.py's to say.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from achilles.runtime import backoff

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class WorkQueue(Generic[K, V]):
    """Waiting keys in arrival order, each with its newest item; `take` a key, handle it,
    then `done` it. A key put while it is being handled waits until `done`, so no two
    threads ever handle one key at once, and the newer item is handled after.

    A handling that failed re-adds its key with `add_rate_limited`: the item waits out
    the key's backoff, then is put as any other (so it replaces an older item still
    waiting, and waits for a handling under way). A handling that succeeded calls
    `forget`: the backoff starts again, and a re-add asked for before that handling was
    taken is dropped (the handling saw a newer state than the one that failed)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        merge: Callable[[V, V], V] | None = None,
    ) -> None:
        """`merge(waiting, newer)`: the item a key waits with when a newer one comes while
        it waits (by default the newer one)."""
        self._clock = clock
        self._merge = merge
        lock = threading.Lock()
        self._changed = threading.Condition(lock)  # a key became ready, or a re-add due
        self._handled = threading.Condition(lock)  # a key's handling ended
        self._order: deque[K] = deque()  # keys ready to take, oldest first
        self._items: dict[K, V] = {}  # every waiting key's newest item
        self._handling: dict[K, int] = {}  # key -> the sequence number at its take
        self._delayed: list[tuple[float, int, K, V]] = []  # (due, seq, key, item) heap
        self._failures: dict[K, int] = {}
        self._seq = 0

    def put(self, key: K, item: V) -> None:
        with self._changed:
            self._put(key, item)

    def _put(self, key: K, item: V) -> None:
        waiting = key in self._items
        if waiting and self._merge is not None:
            item = self._merge(self._items[key], item)
        self._items[key] = item
        if not waiting and key not in self._handling:
            self._order.append(key)
            self._changed.notify()

    def add_rate_limited(self, key: K, item: V) -> float:
        """Put `item` once the key's backoff is over; the delay (1 s, doubling to 60 s
        with each failure since the key's last `forget`)."""
        with self._changed:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            delay = backoff.delay(failures)
            self._seq += 1
            heapq.heappush(self._delayed, (self._clock() + delay, self._seq, key, item))
            self._changed.notify()
        return delay

    def forget(self, key: K) -> None:
        """`key`'s handling succeeded: its backoff starts again, and its re-adds asked
        for before that handling was taken are dropped."""
        with self._changed:
            self._failures.pop(key, None)
            taken_at = self._handling.get(key, self._seq + 1)
            kept = [entry for entry in self._delayed if entry[2] != key or entry[1] > taken_at]
            if len(kept) != len(self._delayed):
                heapq.heapify(kept)
                self._delayed = kept

    def retrying(self, key: K) -> bool:
        """A re-add of `key` waits out its backoff."""
        with self._changed:
            return any(entry[2] == key for entry in self._delayed)

    def waiting(self, key: K) -> bool:
        """An item of `key` waits to be taken (one being handled, or waiting out its
        backoff, does not count)."""
        with self._changed:
            return key in self._items

    def _promote_due(self) -> float | None:
        """Put the re-adds whose backoff is over; seconds until the next one (None:
        none waits)."""
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key, item = heapq.heappop(self._delayed)
            self._put(key, item)
        return self._delayed[0][0] - now if self._delayed else None

    def take(self, timeout: float) -> tuple[K, V] | None:
        """The oldest ready key and its newest item, marked as being handled; None when
        none came within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                next_due = self._promote_due()
                if self._order:
                    key = self._order.popleft()
                    self._seq += 1
                    self._handling[key] = self._seq
                    return key, self._items.pop(key)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._changed.wait(remaining if next_due is None else min(remaining, next_due))

    def done(self, key: K) -> None:
        """`key` is handled; an item put meanwhile is ready now."""
        with self._changed:
            self._handling.pop(key, None)
            if key in self._items:
                self._order.append(key)
                self._changed.notify()
            self._handled.notify_all()

    def wait_handled(self, keys: Iterable[K], timeout: float) -> bool:
        """Wait until none of `keys` waits to be taken or is being handled (a re-add
        waiting out its backoff does not count: that handling ended, and failed), within
        `timeout` seconds; whether they all were. As a controller waits for its informers'
        first listing (client-go's `WaitForCacheSync`), a part waits for what another
        part's listing put here to be handled."""
        pending = set(keys)
        deadline = time.monotonic() + timeout
        with self._handled:
            while True:
                pending = {key for key in pending if key in self._items or key in self._handling}
                if not pending:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._handled.wait(remaining)

    def __len__(self) -> int:
        """Keys waiting (not those being handled, nor re-adds waiting out a backoff)."""
        with self._changed:
            return len(self._items)


def process(
    queue: WorkQueue[K, V], handle: Callable[[V], None], stop: threading.Event, take_seconds: float
) -> None:
    """A worker thread's loop: take a key's newest item, handle it, mark the key done,
    until `stop` is set (looked at every `take_seconds` at least). `handle` must not
    raise: a failure is its own to log and retry."""
    while not stop.is_set():
        taken = queue.take(take_seconds)
        if taken is None:
            continue
        key, item = taken
        try:
            handle(item)
        finally:
            queue.done(key)
