"""Memory the process freed, given back to the system (the sweeper's `memory` pass).

First the garbage cycles: kopf wraps each event's body in a `Body` whose views (`meta`,
`spec`, `status`) refer back to it, a cycle that only the collector frees. A body that
lived a while (queued during a listing, handled on a thread) is promoted to the oldest
generation, whose collections are rare (`settle_collector`) and stop altogether when the
operator goes idle, since nothing allocates: `achilles bench intake` found 2,161 bodies
alive after the first intake of 2,000 Agents, idle, each held only by its own cycle (2
with this pass, at 100,000 Agents too). So the pass collects the oldest generation when
something reached it since the last pass (a middle-generation collection ran; idle,
none does and the pass walks nothing). The RSS keeps the listing's peak all the same
(Python returns an arena to the system only once it is empty): what this frees is
reused, not given back (docs/performance.md, "100,000 Agents").

glibc keeps what Python frees in its heaps for reuse, one heap per thread that allocated
(kopf's handler threads, the loops), and returns it to the system only from a heap's top.
A start-up listing of every Agent allocates and frees a body per Agent, so without this
the RSS stays at the listing's peak: `achilles bench intake` at 10,000 Agents measured
236 MiB after a restart and 169 MiB after `malloc_trim(0)`, 419 -> 336 MiB after a first
intake (`MALLOC_ARENA_MAX=2` gave nothing: 249 MiB). Trimming walks the heaps and gives
their free pages back; it costs milliseconds, every TRIM_EVERY seconds.

The cyclic garbage collector is set once the operator has started (`settle_collector`):
its full collections walked every object the imports made, and a listing of every Agent
allocates enough containers to trigger many of them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc

TRIM_EVERY = 30.0
# The oldest generation's threshold: a full collection once this many collections of the
# middle one have run (CPython's default: 10), still only when the objects promoted since
# the last one are a quarter of those it would walk. After the freeze that quarter is
# small, and a restart under 10,000 Agents ran 19 full collections (3.2 s of CPU) at 10,
# 5 (0.6 s) at 100. The young generations keep their thresholds: at 10,000 instead of
# 700 the restart cost 11.3 instead of 14.1 core-s, but left the RSS at 281 MiB, not 238
# (`achilles bench intake`; the goal is 256).
OLDEST_THRESHOLD = 100


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


class MemoryPass:
    """Garbage cycles collected, then the heaps' free pages given back (module docstring)."""

    def __call__(self) -> bool:
        # The middle generation's collections since the oldest one's last: each promoted
        # its survivors into the oldest generation.
        if gc.get_count()[2] > 0:
            gc.collect()
        return release_free_memory()


def release_free_memory() -> bool:
    """Give the heaps' free pages back (glibc); True when some were. A no-op elsewhere."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def settle_collector() -> None:
    """What the start made (modules, classes, the settings, the runtime's objects), moved
    out of the collector's walks (`gc.freeze`) after one collection, and full collections
    made rarer (OLDEST_THRESHOLD).

    Each full collection walks every tracked object that is not frozen: the imports alone
    are about 130,000 of them, and at a restart under 10,000 Agents the listing's bodies
    and kopf's per-object state promote enough objects to run one every few hundred
    Agents (timed with `gc.callbacks` in `achilles bench intake`: 16 full collections,
    3.9 s of a restart's CPU; 5, 0.6-1.1 s, once settled). Reference counting still frees
    a frozen object; only a cycle made before the freeze and broken after it is never
    collected, hence the collection first."""
    gc.collect()
    gc.freeze()
    youngest, older, _ = gc.get_threshold()
    gc.set_threshold(youngest, older, OLDEST_THRESHOLD)
