"""Importing the runner's modules without the cyclic garbage collector.

A run pod's start to its claim is mostly the interpreter importing SQLAlchemy and
psycopg, and importing allocates hundreds of thousands of objects that all stay alive
(modules, classes, functions): each allocation threshold passed starts a collection that
finds nothing to free. Pausing the collector for the imports saves about a sixth of their
CPU (docs/performance.md); it is enabled again as soon as they are done, so the run itself
collects as usual. Light on purpose: it is imported before the modules it speeds up.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block (if it was on), then on again."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
