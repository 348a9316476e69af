"""`achilles bench burst-vs-cronjob`: N agents due at one slot against N CronJobs due at
one minute, on the same API server and controller manager, one after the other.

Achilles side: N `Agent`s (default 1,000; ten per owner) with the calendar schedule
"daily at HH:MM" of one coming minute, `maxConcurrency` = N; the operator (a process,
its own ServiceAccount) runs from before the Agents exist. CronJob side, afterwards,
with the operator stopped and the Achilles Jobs deleted: N `batch/v1` CronJobs
`M H * * *` (timeZone UTC) for another coming minute, handled by the stack's
kube-controller-manager with its default settings.

Measured for each Job: from the slot to its ADDED watch event (the watch is open before
the slot), and to its `creationTimestamp` (whole seconds, so floored); p50/p99/max and
the time until all N exist, and Achilles / CronJob for each. Pods stay Pending (no node
serves their namespaces): what is measured is the controllers' Job creation.

Beside them, the API server's own ceiling (issue 20): with the operator stopped and its
Jobs deleted, the same N run Jobs (the operator's manifests) created straight from this
process, `PARALLEL_CREATES` at a time with the operator's create call, timed from the
first call to the last ADDED event; Achilles' slot -> all Jobs against it, as a share.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text

from achilles.db.database import Database
from achilles.k8s.run_metadata import RUN_SELECTOR
from bench.apiserver_counts import operator_request_counts
from bench.burst_ceiling import measure_ceiling
from bench.cluster import RUNS_NAMESPACE, BenchCluster, bench_cluster, ensure_namespace
from bench.cpu_meter import CpuMeter
from bench.jobwatch import JobWatch, SeenJob
from bench.operator_process import running_operator
from bench.report import Progress, Report, Series, at_least, at_most
from bench.workload import (
    agent_manifest,
    create_agent,
    create_all,
    create_model,
    insert_owners,
    report_timeline,
    wait_until,
)

NAME = "burst-vs-cronjob"
DEFAULT_SIZE = 1000
AGENTS_NAMESPACE = "bench-agents"
CRON_NAMESPACE = "bench-cronjobs"
MODEL = "bench"
AGENTS_PER_OWNER = 10
ALL_WITHIN_S = 60.0
ALL_JOBS_WITHIN_S = 5.0  # issue 20, 1,000 Agents
FIRST_JOB_WITHIN_S = 0.3
DRAIN_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Burst:
    slot: datetime
    jobs: list[SeenJob]

    def event_latencies(self) -> list[float]:
        return [job.seen_at - self.slot.timestamp() for job in self.jobs]

    def created_latencies(self) -> list[float]:
        return [(job.created - self.slot).total_seconds() for job in self.jobs]


def next_minute_after(seconds: float) -> datetime:
    at = datetime.now(UTC) + timedelta(seconds=seconds)
    return at.replace(second=0, microsecond=0) + timedelta(minutes=1)


def _sleep_until(at: datetime, progress: Progress) -> None:
    remaining = (at - datetime.now(UTC)).total_seconds()
    if remaining > 0:
        progress(f"slot {at:%H:%M:%S} in {remaining:.0f}s")
        time.sleep(remaining)


def _collect(watcher: JobWatch, size: int, slot: datetime, progress: Progress) -> Burst:
    _sleep_until(slot, progress)
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    last = -1
    while time.monotonic() < deadline:
        count = watcher.count()
        if count >= size:
            break
        if count != last:
            progress(f"{count:,}/{size:,} Jobs created")
            last = count
        time.sleep(1.0)
    jobs = watcher.snapshot()
    watcher.stop()
    if len(jobs) < size:
        raise RuntimeError(f"only {len(jobs)} of {size} Jobs within {DRAIN_TIMEOUT_S:.0f}s")
    progress(f"all {size:,} Jobs created")
    return Burst(slot=slot, jobs=jobs)


def _achilles_burst(
    cluster: BenchCluster,
    database: Database,
    size: int,
    lead_s: float,
    report: Report,
    progress: Progress,
) -> Burst:
    owners = math.ceil(size / AGENTS_PER_OWNER)
    insert_owners(database, owners)
    ensure_namespace(cluster, AGENTS_NAMESPACE)
    with running_operator(cluster, progress, runner_command="/bin/true") as operator:
        create_model(cluster, MODEL, "http://127.0.0.1:9/v1")
        slot = next_minute_after(lead_s)
        schedule = {"type": "calendar", "cadence": "daily", "time": f"{slot:%H:%M}"}
        manifests = [
            agent_manifest(f"burst-{i}", f"owner-{1 + i % owners}", MODEL, schedule)
            for i in range(size)
        ]
        took = create_all(
            manifests,
            lambda m: create_agent(cluster, AGENTS_NAMESPACE, m),
            progress,
            "Agents",
        )
        report.details["achilles: seconds to create the Agents"] = round(took, 1)

        def all_scheduled() -> bool:
            operator.check_alive()
            with database.engine.connect() as conn:
                ready = conn.execute(
                    text("SELECT count(*) FROM agents WHERE next_run_at = :slot"),
                    {"slot": slot},
                ).scalar_one()
            return int(ready) >= size

        started = time.monotonic()
        wait_until(
            all_scheduled,
            timeout=max(1.0, (slot - datetime.now(UTC)).total_seconds() - 2),
            what=f"{size:,} agents scheduled for {slot:%H:%M} UTC",
            progress=progress,
        )
        report.details["achilles: seconds until every agent had its slot"] = round(
            time.monotonic() - started + took, 1
        )
        before = operator_request_counts(cluster)
        watcher = JobWatch(cluster.api, RUNS_NAMESPACE, RUN_SELECTOR).start()
        _sleep_until(slot, progress)
        cpu = CpuMeter(cluster, operator=operator.process.pid if operator.process else None)
        burst = _collect(watcher, size, slot, progress)
        cpu.report(report, "achilles: cores used, slot -> all Jobs seen")
        report_timeline(report, database, burst.jobs, "achilles: ")
        after = operator_request_counts(cluster)
        report.details["achilles: operator requests during the burst"] = {
            verb: after[verb] - before[verb] for verb in before
        }
        operator.check_alive()
    return burst


def _clear_achilles_jobs(cluster: BenchCluster, progress: Progress) -> None:
    cluster.batch.delete_collection_namespaced_job(
        RUNS_NAMESPACE, label_selector=RUN_SELECTOR, propagation_policy="Background"
    )

    def gone() -> bool:
        jobs = cluster.batch.list_namespaced_job(RUNS_NAMESPACE, limit=1).items
        pods = cluster.core.list_namespaced_pod(RUNS_NAMESPACE, limit=1).items
        return not jobs and not pods

    wait_until(gone, 600, "the Achilles Jobs and pods to be deleted", progress)


def cronjob_manifest(name: str, slot: datetime) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": f"{slot.minute} {slot.hour} * * *",
            "timeZone": "UTC",
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {"name": "run", "image": "bench:none", "command": ["/bin/true"]}
                            ],
                        }
                    },
                }
            },
        },
    }


def _cronjob_burst(
    cluster: BenchCluster, size: int, lead_s: float, report: Report, progress: Progress
) -> Burst:
    ensure_namespace(cluster, CRON_NAMESPACE)
    slot = next_minute_after(lead_s / 3)
    took = create_all(
        [cronjob_manifest(f"burst-{i}", slot) for i in range(size)],
        lambda m: cluster.batch.create_namespaced_cron_job(CRON_NAMESPACE, m),
        progress,
        "CronJobs",
    )
    report.details["cronjob: seconds to create the CronJobs"] = round(took, 1)
    watcher = JobWatch(cluster.api, CRON_NAMESPACE).start()
    return _collect(watcher, size, slot, progress)


def _side(report: Report, side: str, burst: Burst) -> dict[str, Series]:
    events = report.latency(
        f"{side}: slot -> Job (watch event)",
        burst.event_latencies(),
        unit="s",
        goal=at_most(ALL_WITHIN_S, "s") if side == "achilles" else None,
        on="max",
        note="goal: every Job within 60 s of the slot" if side == "achilles" else "",
        keep_samples=True,
    )
    created = report.latency(
        f"{side}: slot -> Job (creationTimestamp)",
        burst.created_latencies(),
        unit="s",
        on="max",
        note="whole seconds: creationTimestamp is truncated",
    )
    assert events.series is not None
    assert created.series is not None
    return {"events": events.series, "created": created.series}


def run(
    size: int, json_path: Path | None, server_url: str | None = None, *, lead_s: float | None = None
) -> Report:
    """`lead_s`: the least time from now to the Achilles slot (the Agents are created and
    scheduled meanwhile; a third of it for the CronJobs); default 60 s + 0.15 s per agent."""
    progress = Progress(NAME)
    lead_s = 60 + 0.15 * size if lead_s is None else lead_s
    report = Report(
        benchmark=NAME,
        size=size,
        parameters={"agents": size, "cronjobs": size, "agents_per_owner": AGENTS_PER_OWNER},
    )
    with bench_cluster(
        progress,
        report=report,
        max_concurrency=max(size, 4),
        server_url=server_url,
    ) as cluster:
        report.details["versions"] = cluster.versions()
        database = Database(cluster.database.url, pool_size=2, application_name="achilles-bench")
        try:
            achilles = _achilles_burst(cluster, database, size, lead_s, report, progress)
        finally:
            database.dispose()
        _clear_achilles_jobs(cluster, progress)
        ceiling = measure_ceiling(cluster, size, AGENTS_NAMESPACE, report, progress)
        _clear_achilles_jobs(cluster, progress)
        cron = _cronjob_burst(cluster, size, lead_s, report, progress)
    ours = _side(report, "achilles", achilles)
    theirs = _side(report, "cronjob", cron)
    all_in = max(achilles.event_latencies())
    report.add_value(
        "achilles: share of the API server's ceiling (ceiling time / slot -> all Jobs)",
        100 * ceiling / all_in,
        "%",
        goal=at_least(70, "%"),
        note="the same N Jobs straight to the API server, beside it (issue 20's goal)",
    )
    report.add_value(
        "achilles: slot -> all Jobs",
        all_in,
        "s",
        goal=at_most(ALL_JOBS_WITHIN_S, "s"),
        note=f"issue 20's goal; the first within {FIRST_JOB_WITHIN_S:g} s (next figure)",
    )
    report.add_value(
        "achilles: slot -> first Job",
        min(achilles.event_latencies()),
        "s",
        goal=at_most(FIRST_JOB_WITHIN_S, "s"),
    )
    for statistic in ("median", "p99", "max"):
        ratio = getattr(ours["events"], statistic) / max(getattr(theirs["events"], statistic), 1e-3)
        report.add_value(
            f"achilles / cronjob, {statistic} (watch event)",
            ratio,
            "x",
            goal=at_most(1, "x"),
            note="below 1: Achilles created its Jobs sooner",
        )
    report.notes.append(
        "kube-controller-manager runs with its defaults (--kube-api-qps 20, --kube-api-burst "
        "30, --concurrent-cron-job-syncs 5); the operator's client is not rate-limited."
    )
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report
