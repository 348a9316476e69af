"""Bounded waits on a condition: the only way the local stack (and the tests) wait for anything.

Components become ready in their own time; we poll a cheap probe (a health endpoint,
a file, a process table entry) until it holds or a deadline passes, and then say
precisely what did not happen. Never a fixed sleep as synchronisation.

`poll` is the one loop; `wait_until` is the local stack's way to fail, and the tests'
`wait_for` (tests/waiting.py) fails its own way on top of the same loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from achilles.errors import LocalStackError

T = TypeVar("T")


def poll(predicate: Callable[[], T | None], *, timeout: float, interval: float) -> T | None:
    """Call `predicate` until it returns something truthy, which is returned; after
    `timeout` seconds return its last (falsy) value instead."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)  # poll interval of a probe, not a stand-in for synchronisation


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
) -> None:
    """Return once `predicate()` holds; after `timeout` raise LocalStackError naming `what`."""
    if not poll(predicate, timeout=timeout, interval=interval):
        raise LocalStackError(f"timed out after {timeout:.0f}s waiting for {what}")
