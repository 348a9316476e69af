"""Memory the process freed, given back to the system (the sweeper's `memory` pass).

glibc keeps what Python frees in its heaps for reuse, one heap per thread that allocated
(kopf's handler threads, the loops), and returns it to the system only from a heap's top.
A start-up listing of every Agent allocates and frees a body per Agent, so without this
the RSS stays at the listing's peak: `achilles bench intake` at 10,000 Agents measured
236 MiB after a restart and 169 MiB after `malloc_trim(0)`, 419 -> 336 MiB after a first
intake (`MALLOC_ARENA_MAX=2` gave nothing: 249 MiB). Trimming walks the heaps and gives
their free pages back; it costs milliseconds, every TRIM_EVERY seconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

TRIM_EVERY = 30.0


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
