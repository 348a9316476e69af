"""Bounded waits on a condition: the only way the local stack waits for anything.

Components become ready in their own time; we poll a cheap probe (a health endpoint,
a file, a process table entry) until it holds or a deadline passes, and then say
precisely what did not happen. Never a fixed sleep as synchronisation.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from achilles.errors import LocalStackError


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
) -> None:
    """Return once `predicate()` holds; after `timeout` raise LocalStackError naming `what`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise LocalStackError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)  # poll interval of a probe, not a stand-in for synchronisation
