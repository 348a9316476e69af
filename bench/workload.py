"""The benchmarks' workload: Kubernetes objects created in bulk, and the journal read
and fast-forwarded."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, BIGINT, TIMESTAMP

from achilles.db.database import Database
from achilles.k8s.run_metadata import RUN_ID_LABEL
from bench.cluster import GROUP, VERSION, BenchCluster, Progress
from bench.jobwatch import SeenJob
from bench.report import Report


def create_all(
    items: list[Any], create: Callable[[Any], object], progress: Progress, what: str
) -> float:
    """Create `items` with 8 parallel clients' worth of calls; seconds it took."""
    started = time.monotonic()
    done = 0
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in pool.map(create, items):
            done += 1
            if done % 1000 == 0 or done == len(items):
                progress(f"created {done:,}/{len(items):,} {what}")
    return time.monotonic() - started


def agent_manifest(
    name: str, owner: str, model: str, schedule: dict[str, Any] | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"owner": owner, "prompt": "Summarise my week.", "model": model}
    if schedule is not None:
        spec["schedule"] = schedule
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Agent",
        "metadata": {"name": name},
        "spec": spec,
    }


def model_manifest(name: str, base_url: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AgentModel",
        "metadata": {"name": name},
        "spec": {"baseURL": base_url, "model": "bench"},
    }


def create_model(cluster: BenchCluster, name: str, base_url: str) -> None:
    cluster.custom.create_cluster_custom_object(
        GROUP, VERSION, "agentmodels", model_manifest(name, base_url)
    )


def create_agent(cluster: BenchCluster, namespace: str, manifest: dict[str, Any]) -> None:
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "agents", manifest)


def wait_until(
    check: Callable[[], Any], timeout: float, what: str, progress: Progress, every: float = 1.0
) -> Any:
    """Poll `check` until it returns something truthy; report progress every 10 s."""
    started = time.monotonic()
    last_report = started
    while True:
        value = check()
        if value:
            return value
        now = time.monotonic()
        if now - started > timeout:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        if now - last_report >= 10:
            progress(f"waiting for {what} ({now - started:.0f}s)")
            last_report = now
        time.sleep(every)


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def insert_owners(database: Database, owners: int) -> None:
    """Owners `owner-1..owner-N` (standalone installs keep users in the journal)."""
    with database.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO users (key) SELECT 'owner-' || g "
                "FROM generate_series(1, CAST(:n AS bigint)) g"
            ),
            {"n": owners},
        )


def scheduled_agent_ids(database: Database) -> list[int]:
    """Agents the operator has given a slot, oldest first."""
    with database.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id FROM agents WHERE next_run_at IS NOT NULL ORDER BY id")
        ).scalars()
        return [int(row) for row in rows]


def fast_forward(database: Database, slots: dict[int, datetime]) -> None:
    """Move these agents' next slot to the given instants, in one statement.

    Schedules have minute (calendar) or hour (interval) granularity, so slots that fall
    every second for minutes cannot be written as CRs; the benchmark writes
    `next_run_at` the way the operator's scheduler itself does, and the operator takes
    it from there (the NOTIFY on `next_run_at` wakes its scheduler)."""
    ids = list(slots)
    with database.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE agents SET next_run_at = s.slot FROM unnest(:ids, :slots) AS s(id, slot) "
                "WHERE agents.id = s.id"
            ).bindparams(
                bindparam("ids", type_=ARRAY(BIGINT)),
                bindparam("slots", type_=ARRAY(TIMESTAMP(timezone=True))),
            ),
            {"ids": ids, "slots": [slots[i] for i in ids]},
        )


def run_states(database: Database) -> dict[str, int]:
    with database.engine.connect() as conn:
        rows = conn.execute(text("SELECT state, count(*) FROM agent_runs GROUP BY state")).all()
    return {str(state): int(count) for state, count in rows}


def report_timeline(
    report: Report, database: Database, jobs: list[SeenJob], prefix: str = ""
) -> None:
    """Where each run's slot -> Job time went, from the journal's own stamps: the
    scheduler's pass enqueued it (`created_at`, the pass's database clock), a dispatcher
    pass took it (`dispatched_at`, likewise), its Job's ADDED event arrived."""
    seen = {
        int(job.labels[RUN_ID_LABEL]): job.seen_at for job in jobs if RUN_ID_LABEL in job.labels
    }
    with database.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, scheduled_for, created_at, dispatched_at FROM agent_runs "
                "WHERE id = ANY(:ids) AND scheduled_for IS NOT NULL AND dispatched_at IS NOT NULL"
            ).bindparams(bindparam("ids", type_=ARRAY(BIGINT))),
            {"ids": list(seen)},
        ).all()
    if not rows:
        return
    report.latency(
        f"{prefix}slot -> run enqueued (scheduler pass)",
        [(r.created_at - r.scheduled_for).total_seconds() for r in rows],
        unit="s",
    )
    report.latency(
        f"{prefix}enqueued -> dispatcher pass",
        [(r.dispatched_at - r.created_at).total_seconds() for r in rows],
        unit="s",
    )
    report.latency(
        f"{prefix}dispatcher pass -> Job (watch event)",
        [seen[r.id] - r.dispatched_at.timestamp() for r in rows],
        unit="s",
        note="the Job create calls (8 in parallel) and the watch's delivery",
    )
