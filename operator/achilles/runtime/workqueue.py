"""A workqueue as controller-runtime has one (client-go's `workqueue`): items keyed by
object, the newest item of a key replacing the one still waiting, and a key handled by
one thread at a time; `process` is a worker thread's loop over it.

A key waits at most once however many items came for it (the newest wins: each carries
the whole object, or says to read it afresh), so the queue is bounded by the number of
objects, not the number of events. Why the Agent events go through one, rather than
stay on kopf's per-object workers, is handlers/agents.py's to say.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class WorkQueue(Generic[K, V]):
    """Waiting keys in arrival order, each with its newest item; `take` a key, handle it,
    then `done` it. A key put while it is being handled waits until `done`, so no two
    threads ever handle one key at once, and the newer item is handled after."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._order: deque[K] = deque()  # keys ready to take, oldest first
        self._items: dict[K, V] = {}  # every waiting key's newest item
        self._handling: set[K] = set()

    def put(self, key: K, item: V) -> None:
        with self._changed:
            waiting = key in self._items
            self._items[key] = item
            if not waiting and key not in self._handling:
                self._order.append(key)
                self._changed.notify()

    def waiting(self, key: K) -> bool:
        """An item of `key` waits to be taken (one being handled does not count)."""
        with self._changed:
            return key in self._items

    def take(self, timeout: float) -> tuple[K, V] | None:
        """The oldest ready key and its newest item, marked as being handled; None when
        none came within `timeout` seconds."""
        with self._changed:
            if not self._changed.wait_for(lambda: bool(self._order), timeout):
                return None
            key = self._order.popleft()
            self._handling.add(key)
            return key, self._items.pop(key)

    def done(self, key: K) -> None:
        """`key` is handled; an item put meanwhile is ready now."""
        with self._changed:
            self._handling.discard(key)
            if key in self._items:
                self._order.append(key)
                self._changed.notify()

    def __len__(self) -> int:
        """Keys waiting (not those being handled)."""
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
