"""Bounded waits: every scenario waits for a condition, never for a fixed time.

The loop is the local stack's (`achilles_dev.waiting.poll`); a timeout raises
`ChaosTimeout` naming what did not happen and the last value seen, which the suite
records as the scenario's failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from achilles_dev.waiting import poll

T = TypeVar("T")


class ChaosTimeout(AssertionError):
    """A condition a scenario waited for did not hold in time."""


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    *,
    what: str,
    interval: float = 0.2,
) -> T:
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
