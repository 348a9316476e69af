"""A memory probe for the operator under `achilles bench` (never the product's code).

With this directory on PYTHONPATH and ACHILLES_BENCH_MEMORY_PROBE=<file>, every process
of that interpreter appends one JSON line per second to <file>: its RSS, and with
PYTHONTRACEMALLOC set, the Python heap tracemalloc sees (live and peak). A file
<file>.trim, when it appears, makes the process call glibc's malloc_trim(0) once and
record the RSS before and after: how much of the RSS is memory freed but kept by malloc;
when tracing, that record also names the 15 files that hold the most of the Python heap.
That record also carries /proc/self/smaps's RSS summed by mapping (the brk heap, the
anonymous mappings, each shared library): where the RSS that is not the heap lives.
Each record counts the asyncio tasks alive (kopf's per-object workers); with
ACHILLES_BENCH_MEMORY_PROBE_BODIES_EVERY=<seconds>, a record that often also counts the
parsed Agent bodies alive (a walk of the whole heap): what the peak is made of. Each
record also carries the cyclic collector's collections so far and their seconds, per
generation (`gc.callbacks`): what the collector costs the process.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import os
import threading
import time
import tracemalloc
from pathlib import Path


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    return 0


def _mapping_kind(header: str) -> str:
    """A /proc/self/smaps mapping's kind: its file's name, or [heap] (brk), or anonymous
    memory (pymalloc's arenas, glibc's thread arenas, thread stacks and large blocks:
    the kernel merges adjacent ones, so their sizes do not tell them apart)."""
    fields = header.split(maxsplit=5)
    name = fields[5].strip() if len(fields) > 5 else ""
    if name.startswith("[") or not name:
        return name or "anonymous"
    return Path(name).name


def _smaps_kib() -> dict[str, int]:
    """RSS (KiB) by kind of mapping, the largest first."""
    totals: dict[str, int] = {}
    header = ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split(maxsplit=1)[0]
        if not first.endswith(":"):  # a mapping's header: "start-end perms offset dev inode path"
            header = line
        elif first == "Rss:":
            kind = _mapping_kind(header)
            totals[kind] = totals.get(kind, 0) + int(line.split()[1])
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def _holders(obj: object, seen: set[int], depth: int) -> list[object]:
    """Who refers to `obj`, `depth` levels up: type names, with a dict's keys."""
    if depth == 0:
        return []
    found: list[object] = []
    for referrer in gc.get_referrers(obj):
        if id(referrer) in seen or type(referrer).__name__ in ("frame", "list_iterator"):
            continue
        seen.add(id(referrer))
        name = type(referrer).__name__
        if isinstance(referrer, dict):
            name += "{" + ",".join(sorted(str(k) for k in list(referrer)[:6])) + "}"
        found.append([name, _holders(referrer, seen, depth - 1)])
        if len(found) >= 3:
            break
    return found


def _agent_bodies() -> dict[str, object]:
    """The parsed Agent bodies alive, and what holds three of them: a body outliving its
    event is memory that grows with the Agents."""
    bodies = [o for o in gc.get_objects() if _is_agent_body(o)]
    seen = {id(bodies)}
    return {"count": len(bodies), "holders": [_holders(b, seen, 5) for b in bodies[:3]]}


def _is_agent_body(o: object) -> bool:
    return isinstance(o, dict) and o.get("kind") == "Agent" and "metadata" in o


def _count_agent_bodies() -> int:
    return sum(1 for o in gc.get_objects() if _is_agent_body(o))


# Per generation: collections and seconds so far; the start of the one under way.
_GC_TOTALS: dict[str, list[float]] = {"0": [0, 0.0], "1": [0, 0.0], "2": [0, 0.0]}
_GC_STARTED: list[float] = [0.0]


def _timed_collection(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _GC_STARTED[0] = time.perf_counter()
        return
    totals = _GC_TOTALS[str(info["generation"])]
    totals[0] += 1
    totals[1] += time.perf_counter() - _GC_STARTED[0]


def _probe(path: Path) -> None:
    trim = path.with_name(path.name + ".trim")
    libc = ctypes.CDLL("libc.so.6")
    count_every = float(os.environ.get("ACHILLES_BENCH_MEMORY_PROBE_BODIES_EVERY") or 0)
    counted_at = 0.0
    with path.open("a") as out:
        while True:
            # asyncio tasks alive: kopf's per-object workers, each holding the last body it
            # handled until it has been idle for settings.queueing.idle_timeout.
            record: dict[str, object] = {
                "at": time.time(),
                "pid": os.getpid(),
                "rss_kib": _rss_kib(),
                "tasks": len(getattr(asyncio.tasks, "_all_tasks", ())),
                "gc": {gen: [int(n), round(s, 4)] for gen, (n, s) in _GC_TOTALS.items()},
            }
            if count_every and time.monotonic() - counted_at >= count_every:
                # Parsed Agent bodies alive now: a full walk of the heap, so only on request.
                counted_at = time.monotonic()
                record["agent_bodies_alive"] = _count_agent_bodies()
            if tracemalloc.is_tracing():
                current, peak = tracemalloc.get_traced_memory()
                record |= {"traced_kib": current // 1024, "traced_peak_kib": peak // 1024}
            if trim.exists():
                trim.unlink()
                before = _rss_kib()
                libc.malloc_trim(0)
                record |= {"trim_before_kib": before, "trim_after_kib": _rss_kib()}
                record["smaps_rss_kib"] = _smaps_kib()
                record["agent_bodies"] = _agent_bodies()
                if tracemalloc.is_tracing():
                    top = tracemalloc.take_snapshot().statistics("filename")[:15]
                    record["heap_by_file_kib"] = [
                        [str(stat.traceback[0].filename), stat.size // 1024, stat.count]
                        for stat in top
                    ]
            out.write(json.dumps(record) + "\n")
            out.flush()
            time.sleep(1.0)


_target = os.environ.get("ACHILLES_BENCH_MEMORY_PROBE")
if _target:
    gc.callbacks.append(_timed_collection)
    threading.Thread(target=_probe, args=(Path(_target),), daemon=True, name="memory-probe").start()
