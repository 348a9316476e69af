"""Importing the runner's modules without the cyclic garbage collector's rework.

A run pod's start to its claim is mostly the interpreter importing SQLAlchemy and
psycopg. Importing allocates hundreds of thousands of container objects (modules,
classes, functions) that stay alive for the whole process, and the collector, woken by
every few hundred allocations, traverses them again and again, ever more of them, to find
nothing to free. So the runner imports with the collector paused and then moves what
exists into its permanent generation (`gc.freeze`), which later collections skip: in the
runner image, a third less CPU for the imports (0.88 against 1.38 s before the claim,
2.1 against 3.3 s in all; docs/performance.md). Merely re-enabling the collector saves
nothing: its first collection then traverses everything imported at once. What the run
allocates afterwards is collected as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def permanent_imports() -> Iterator[None]:
    """The collector paused for the block; then everything alive (the block's imports)
    frozen into the permanent generation and the collector on again, if it was on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
