"""Bounded waits: every scenario waits for a condition, never for a fixed time.

The loop is the local stack's (`achilles_dev.waiting.poll`); a timeout raises
`ChaosTimeout` naming what did not happen and the last value seen, which the suite
records as the scenario's failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from achilles_dev.waiting import poll

T = TypeVar("T")

# What a scenario spent waiting, by what it waited for: what -> [count, seconds]. The
# suite reports it with each scenario, so a slow scenario says where its time went.
_waited: ContextVar[dict[str, list[float]] | None] = ContextVar("waited", default=None)


@contextmanager
def recording_waits() -> Iterator[dict[str, list[float]]]:
    """Record every `wait_for` and `timed` block inside into the dictionary yielded."""
    waited: dict[str, list[float]] = {}
    token = _waited.set(waited)
    try:
        yield waited
    finally:
        _waited.reset(token)


@contextmanager
def timed(what: str) -> Iterator[None]:
    """Record the time of a step that is not a wait (creating 1,000 Agents, a clean-up)."""
    started = time.monotonic()
    try:
        yield
    finally:
        _record(what, time.monotonic() - started)


def _record(what: str, seconds: float) -> None:
    waited = _waited.get()
    if waited is not None:
        entry = waited.setdefault(what, [0, 0.0])
        entry[0] += 1
        entry[1] += seconds


class ChaosTimeout(AssertionError):
    """A condition a scenario waited for did not hold in time."""


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    *,
    what: str,
    interval: float = 0.2,
) -> T:
    with timed(what):
        last = poll(predicate, timeout=timeout, interval=interval)
    if not last:
        raise ChaosTimeout(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
    return last


def hold(seconds: float, *, check: Callable[[], None], interval: float = 0.5) -> None:
    """Keep a fault in place for `seconds` (its duration is the fault, not a synchronisation),
    calling `check` throughout so a scenario sees what breaks while the fault lasts."""
    deadline = time.monotonic() + seconds
    while True:
        check()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(interval, left))  # the fault's duration, polled
