"""Journal work of a claimed run that waits out a database gone away.

From its claim to its model call, and for the write that ends it, a runner's journal work
is tried again while the database is unreachable (`achilles chaos postgres-outage` stops
PostgreSQL right as runs start): a run that outlasts the outage then carries on, or records
its end, instead of exiting with its row `running` for the reaper to fail as stale. The
heartbeat beats on its own thread meanwhile; the pod's deadline bounds the wait.

Only work that is safe to repeat is wrapped: reads, guarded writes, and the approvals'
start (an approved call is claimed by a committed guarded UPDATE before it is made, so a
repeat never makes it twice: `tools/approvals.py`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from achilles.errors import DatabaseUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")
# An unreachable database is tried again this often, doubling.
REACH_FIRST_SECONDS = 0.5
REACH_MOST_SECONDS = 5.0


def when_reachable(what: str, call: Callable[[], T]) -> T:
    """`call`, tried again while the database is unreachable (the pod's deadline bounds
    the wait; the heartbeat thread keeps trying too). Any other error is raised at once."""
    delay = REACH_FIRST_SECONDS
    while True:
        try:
            return call()
        except DatabaseUnavailable as exc:
            log.warning("%s: %s; trying again in %.1f s", what, exc, delay)
        time.sleep(delay)  # a backoff between attempts, not a wait for another thread
        delay = min(2 * delay, REACH_MOST_SECONDS)
