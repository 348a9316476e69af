"""Memory the process freed, given back to the system (the sweeper's `memory` pass).

glibc keeps what Python frees in its heaps for reuse, one heap per thread that allocated
(kopf's handler threads, the loops), and returns it to the system only from a heap's top.
A start-up listing of every Agent allocates and frees a body per Agent, so without this
the RSS stays at the listing's peak: `achilles bench intake` at 10,000 Agents measured
236 MiB after a restart and 169 MiB after `malloc_trim(0)`, 419 -> 336 MiB after a first
intake (`MALLOC_ARENA_MAX=2` gave nothing: 249 MiB). Trimming walks the heaps and gives
their free pages back; it costs milliseconds, every TRIM_EVERY seconds.

The cyclic garbage collector is set once the operator has started (`settle_collector`):
its full collections walk every object the imports made, and a listing of every Agent
allocates enough containers to trigger several of them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc

TRIM_EVERY = 30.0
# The youngest generation's threshold (CPython's default: 700 allocations): a parsed
# Agent body is about 60 containers, most freed by reference counting, not by a
# collection; the collector's own walks were most of a listed body's decoding time.
YOUNGEST_THRESHOLD = 10_000


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 - glibc only (musl has none)
    except (OSError, AttributeError):
        return None
    return libc


def release_free_memory() -> bool:
    """Give the heaps' free pages back (glibc); True when some were. A no-op elsewhere."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def settle_collector() -> None:
    """What the start made (modules, classes, the settings, the runtime's objects), moved
    out of the collector's walks (`gc.freeze`) after one collection, and a young
    generation that is collected less often (YOUNGEST_THRESHOLD).

    Each full collection walks every tracked object: the imports alone are about 200,000
    of them, and at a restart under 10,000 Agents the listing's bodies promoted enough
    objects to run one every few hundred Agents (a simulation of kopf's listing with the
    operator's imports loaded: 0.64 s of CPU per 10,000 bodies decoded, 0.47 s of it the
    collector; 0.20 s frozen, threshold 10,000). Reference counting still frees a frozen
    object; only a cycle made before the freeze and broken after it is never collected,
    hence the collection first."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNGEST_THRESHOLD, older, oldest)
