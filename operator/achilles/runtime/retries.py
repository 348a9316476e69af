"""Failed handlings retried per object, with exponential backoff (1 s, doubling to 60 s),
as client-go's per-item exponential failure rate limiter does, plus what kopf's event
handlers need beside it: a lock per object that a handling and its retry share, and a
requeue (handle an object again, read afresh, though nothing of its own failed).

A retry is remembered by the object's reference only (`R`, e.g. its kind, name,
namespace and uid), never its body. A handling's success supersedes the retry pending
for its object, unless the retry was asked for after that handling began (a requeue
must not be dropped by a handling that read the world before the change it names).
A retry put on a workqueue (`hand_over`) is not due again until that handling ends,
so its backoff goes on without a second copy being fired meanwhile.

Who fires the due retries, and how, is the caller's (handlers/retries.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

FIRST_DELAY = 1.0
MOST_DELAY = 60.0
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
    # Put on a workqueue and not handled yet: not due again until then.
    handed_over: bool = False


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
            delay = min(MOST_DELAY, FIRST_DELAY * 2.0 ** (attempts - 1))
            self._stamp += 1
            self._pending[key] = PendingRetry(
                handler, ref, attempts, self._clock() + delay, self._stamp
            )
        return delay

    def requeue(self, handler: str, ref: R) -> None:
        """Handle this object again, read afresh: something it depends on changed with no
        event of its own (a model it names was created). Due at once; a retry already
        pending keeps its time and backoff, but a handling already under way no longer
        supersedes it (it may have read the world before the change)."""
        key = self._key(handler, ref)
        with self._lock:
            self._stamp += 1
            previous = self._pending.get(key)
            if previous is None:
                self._pending[key] = PendingRetry(handler, ref, 0, self._clock(), self._stamp)
            else:
                self._pending[key] = replace(previous, stamp=self._stamp, handed_over=False)

    def succeeded(self, handler: str, ref: R, begun: int) -> None:
        """A handling of this object that began at `begun` succeeded: it supersedes the
        retry pending, unless that was asked for after it began."""
        key = self._key(handler, ref)
        with self._lock:
            pending = self._pending.get(key)
            if pending is not None and pending.stamp <= begun:
                del self._pending[key]

    def hand_over(self, retry: PendingRetry[R]) -> None:
        """`retry` was put on a workqueue: not due again until that handling ends."""
        key = self._key(retry.handler, retry.ref)
        with self._lock:
            if self._pending.get(key) == retry:
                self._pending[key] = replace(retry, handed_over=True)

    def due(self) -> list[PendingRetry[R]]:
        now = self._clock()
        with self._lock:
            return [
                retry
                for retry in self._pending.values()
                if retry.due <= now and not retry.handed_over
            ]

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)
