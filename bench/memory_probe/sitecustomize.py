"""A memory probe for the operator under `achilles bench` (never the product's code).

With this directory on PYTHONPATH and ACHILLES_BENCH_MEMORY_PROBE=<file>, every process
of that interpreter appends one JSON line per second to <file>: its RSS, and with
PYTHONTRACEMALLOC set, the Python heap tracemalloc sees (live and peak). A file
<file>.trim, when it appears, makes the process call glibc's malloc_trim(0) once and
record the RSS before and after: how much of the RSS is memory freed but kept by malloc;
when tracing, that record also names the 15 files that hold the most of the Python heap.
"""

from __future__ import annotations

import ctypes
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


def _probe(path: Path) -> None:
    trim = path.with_name(path.name + ".trim")
    libc = ctypes.CDLL("libc.so.6")
    with path.open("a") as out:
        while True:
            record: dict[str, object] = {"at": time.time(), "rss_kib": _rss_kib()}
            if tracemalloc.is_tracing():
                current, peak = tracemalloc.get_traced_memory()
                record |= {"traced_kib": current // 1024, "traced_peak_kib": peak // 1024}
            if trim.exists():
                trim.unlink()
                before = _rss_kib()
                libc.malloc_trim(0)
                record |= {"trim_before_kib": before, "trim_after_kib": _rss_kib()}
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
    threading.Thread(target=_probe, args=(Path(_target),), daemon=True, name="memory-probe").start()
