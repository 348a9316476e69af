"""The intake benchmark's memory figures: the operator's own probe (bench/memory_probe,
loaded through sitecustomize) sampled from inside, and what malloc_trim(0) gives back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.cluster import (
    BenchCluster,
)
from bench.report import Progress, Report
from bench.workload import (
    wait_until,
)

PROBE_DIR = Path(__file__).resolve().parent / "memory_probe"


def probe_env(cluster: BenchCluster, tracing: bool) -> dict[str, str]:
    """The operator's environment for bench/memory_probe (its RSS each second; with
    `tracing`, tracemalloc's view of the Python heap)."""
    env = {
        "PYTHONPATH": str(PROBE_DIR),
        "ACHILLES_BENCH_MEMORY_PROBE": str(cluster.work_dir / "memory.jsonl"),
    }
    return env | ({"PYTHONTRACEMALLOC": "1"} if tracing else {})


def probe_records(cluster: BenchCluster) -> list[dict[str, Any]]:
    path = cluster.work_dir / "memory.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def memory_figures(report: Report, cluster: BenchCluster, when: str, progress: Progress) -> None:
    """The Python heap against the RSS now, then the RSS after malloc_trim(0): the part
    of the RSS that is memory Python freed but glibc kept."""
    records = probe_records(cluster)
    if not records:
        return
    last = records[-1]
    # This operator process's records (a restarted operator appends to the same file).
    mine = [r for r in records if r.get("pid") == last.get("pid")]
    if "gc" in last:  # the cyclic collector so far, per generation: [collections, seconds]
        collections = last["gc"]
        report.add_value(f"full collections so far, {when}", collections["2"][0], "")
        report.add_value(
            f"cyclic collector's CPU so far, {when}",
            sum(seconds for _, seconds in collections.values()),
            "s",
            note=f"every generation (gc.callbacks); full ones: {collections['2'][1]:.2f} s",
        )
    if "tasks" in last:
        peak_tasks = max(r["tasks"] for r in mine)
        report.add_value(f"asyncio tasks alive at most, {when}", peak_tasks, "")
    counted = [r["agent_bodies_alive"] for r in mine if "agent_bodies_alive" in r]
    if counted:
        report.add_value(f"Agent bodies alive at most (sampled), {when}", max(counted), "")
    if "traced_kib" in last:
        report.add_value(f"Python heap (tracemalloc), {when}", last["traced_kib"] / 1024, "MiB")
        peak = max(r.get("traced_peak_kib", 0) for r in records)
        report.add_value(f"Python heap peak so far, {when}", peak / 1024, "MiB")
    (cluster.work_dir / "memory.jsonl.trim").touch()

    def trimmed() -> dict[str, Any] | None:
        return next(
            (r for r in probe_records(cluster)[len(records) :] if "trim_after_kib" in r), None
        )

    result = wait_until(trimmed, 30, "malloc_trim in the operator", progress)
    report.add_value(f"RSS before malloc_trim(0), {when}", result["trim_before_kib"] / 1024, "MiB")
    report.add_value(f"RSS after malloc_trim(0), {when}", result["trim_after_kib"] / 1024, "MiB")
    report.details[f"RSS by mapping after malloc_trim(0), {when} (KiB)"] = result["smaps_rss_kib"]
    if "agent_bodies" in result:  # parsed Agent bodies alive, and what holds a few
        report.details[f"Agent bodies alive, {when}"] = result["agent_bodies"]
    if "heap_by_file_kib" in result:  # [file, KiB, blocks], the largest first
        report.details[f"Python heap by file, {when}"] = result["heap_by_file_kib"]
