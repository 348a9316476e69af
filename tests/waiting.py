"""`wait_for`: how tests wait for something to become true. Never a bare sleep.

Usage::

    pod = wait_for(lambda: running_pod(name), timeout=30, what="pod to run")

The predicate is polled until it returns something truthy, which is returned; on
timeout the test fails with `what` and the last value seen, so a failure says what
did not happen instead of hanging or passing by luck. The polling loop is the local
stack's own (`achilles_dev.waiting.poll`); only the way of failing is the tests'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from achilles_dev.waiting import poll

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
    last = poll(predicate, timeout=timeout, interval=interval)
    if not last:
        raise WaitTimeout(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
    return last
