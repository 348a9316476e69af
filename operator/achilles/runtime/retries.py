"""Failed handlings retried per object, with exponential backoff (runtime/backoff.py),
for handlings that have no workqueue of their own (kopf's event handlers of the
catalogue's kinds; a workqueue re-adds a failed key itself: workqueue.py), plus what
those need beside it: a lock per object that a handling and its retry share.

A retry is remembered by the object's reference only (`R`, e.g. its kind, name,
namespace and uid), never its body. A handling's success supersedes the retry pending
for its object, unless the retry was asked for after that handling began.

Who fires the due retries, and how, is the caller's (handlers/retries.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from achilles.runtime import backoff

LOCK_STRIPES = 64

R = TypeVar("R")


@dataclass(frozen=True)
class PendingRetry(Generic[R]):
    handler: str
    ref: R
    attempts: int
    due: float
    # When it was last asked for, in the order of the writes to `Retries`: a handling
    # that began after it supersedes it (`succeeded`).
    stamp: int


class Retries(Generic[R]):
    """The pending retries by (handler, object), and the per-object locks a handling and
    a retry of it share. `key_of` names an object (two refs of one object, one key)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        key_of: Callable[[R], Hashable],
    ) -> None:
        self._clock = clock
        self._key_of = key_of
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, Hashable], PendingRetry[R]] = {}
        self._stamp = 0
        self._stripes = [threading.Lock() for _ in range(LOCK_STRIPES)]

    def _key(self, handler: str, ref: R) -> tuple[str, Hashable]:
        return handler, self._key_of(ref)

    def object_lock(self, ref: R) -> threading.Lock:
        return self._stripes[hash(self._key_of(ref)) % LOCK_STRIPES]

    def begun(self) -> int:
        """A handling begins: what `succeeded` needs to tell the retries asked for since."""
        with self._lock:
            return self._stamp

    def failed(self, handler: str, ref: R) -> float:
        """Retry this object's handling later; the delay until then."""
        key = self._key(handler, ref)
        with self._lock:
            previous = self._pending.get(key)
            attempts = 1 if previous is None else previous.attempts + 1
            delay = backoff.delay(attempts)
            self._stamp += 1
            self._pending[key] = PendingRetry(
                handler, ref, attempts, self._clock() + delay, self._stamp
            )
        return delay

    def succeeded(self, handler: str, ref: R, begun: int) -> None:
        """A handling of this object that began at `begun` succeeded: it supersedes the
        retry pending, unless that was asked for after it began."""
        key = self._key(handler, ref)
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None and pending.stamp <= begun:
                del self._pending[key]

    def due(self) -> list[PendingRetry[R]]:
        now = self._clock()
        with self._lock:
            return [retry for retry in self._pending.values() if retry.due <= now]

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)
