"""`wait_for`: how tests wait for something to become true. Never a bare sleep.

Usage::

    pod = wait_for(lambda: running_pod(name), timeout=30, what="pod to run")

The predicate is polled until it returns something truthy, which is returned; on
timeout the test fails with `what` and the last value seen, so a failure says what
did not happen instead of hanging or passing by luck.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """The awaited condition did not hold in time."""


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    *,
    what: str = "condition",
    interval: float = 0.05,
) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeout(
                f"timed out after {timeout}s waiting for {what}; last value: {last!r}"
            )
        time.sleep(interval)  # poll interval, not synchronisation
