"""`achilles bench kept-jobs`: what finished Jobs cost the operator while nothing happens.

A run's Job is kept `ttlSecondsAfterFinished` (3600 s) after it ends, with its pod, so a
busy installation keeps thousands (7,200 at two runs a second). Their cost should follow
what changes, not how many are kept (issue 20). N real run Jobs (the operator's labels,
named from run ids) whose pods exit at once (`/bin/true` in the runner image) are created
in bulk and run to completion by the real Job controller and the real node (root; issue
39: no longer host processes), so each is kept with its pod, its container ended, as in
use. Then the operator runs against them
with no Agent and nothing due, and over `--window` seconds (300: the old watchers
restarted every 300 s) we count:

- the database's transactions, from PostgreSQL itself (`pg_stat_database` of the
  benchmark's own database, which only the operator uses meanwhile);
- the same by operator thread (so by loop): a SQLAlchemy `begin` listener installed in
  the operator process by a `sitecustomize` on its PYTHONPATH (`TRANSACTIONS_SITE`),
  served on its own /metrics; the operator's code is not changed to count;
- its API requests by verb (the API server's flow-control metrics) and its CPU.

`--before REF` measures the operator of another commit too (a git worktree on the
operator's PYTHONPATH), on the same cluster, the same Jobs and the same database.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any, cast

import psycopg

from achilles.k8s.run_metadata import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RUN_ID_LABEL,
    RUNNER_CONTAINER,
    job_name,
)
from achilles_dev.images import RUNNER_IMAGE
from bench.apiserver_counts import operator_request_counts, request_rates
from bench.cluster import RUNS_NAMESPACE, BenchCluster, bench_cluster
from bench.operator_process import OperatorUnderTest, running_operator
from bench.report import Progress, Report, at_most
from bench.workload import create_all, wait_until

NAME = "kept-jobs"
REPOSITORY = Path(__file__).resolve().parent.parent
DEFAULT_SIZE = 1000
DEFAULT_WINDOW_S = 300.0
SETTLE_S = 60.0  # after the operator starts: its first listing is folded, once
TTL_SECONDS = 3600
# The runs namespace's quota counts pods not yet ended: room for the bulk to run.
CONCURRENT_PODS = 200

TRANSACTIONS_SITE = '''\
"""achilles bench kept-jobs: count the operator's database transactions by thread."""
import threading

from prometheus_client import Counter
from sqlalchemy import event
from sqlalchemy.engine import Engine

_TRANSACTIONS = Counter(
    "bench_db_transactions", "Transactions begun, by thread", ["thread"]
)


@event.listens_for(Engine, "begin")
def _count(connection):
    _TRANSACTIONS.labels(threading.current_thread().name).inc()
'''

_COUNTER_LINE = re.compile(r'^bench_db_transactions_total\{thread="([^"]*)"\} ([0-9.e+]+)$')


def _finished_job(run_id: int) -> dict[str, Any]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY, RUN_ID_LABEL: str(run_id)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(run_id), "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": TTL_SECONDS,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": {  # the runs namespace enforces `restricted`
                        "runAsNonRoot": True,
                        "runAsUser": 10001,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": RUNNER_CONTAINER,
                            "image": RUNNER_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["/bin/true"],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


FINISHED = ("Complete", "Failed")


def _finished_jobs(cluster: BenchCluster) -> int:
    """Jobs in the runs namespace that finished, Complete or Failed (read as JSON, paged):
    a Job whose pod the node lost (ContainerStatusUnknown) is kept as finished too, and
    waiting for it to complete waited forever."""
    done, token = 0, None
    while True:
        response: Any = cluster.batch.list_namespaced_job(
            RUNS_NAMESPACE, limit=500, _continue=token, _preload_content=False
        )
        listing = json.loads(response.data)
        for job in listing.get("items") or []:
            conditions = (job.get("status") or {}).get("conditions") or []
            done += any(c.get("type") in FINISHED and c.get("status") == "True" for c in conditions)
        token = (listing.get("metadata") or {}).get("continue")
        if not token:
            return done


def _server_transactions(cluster: BenchCluster) -> int:
    """Commits and rollbacks PostgreSQL counted in the benchmark's database, less the
    invariant monitor's own (PostgreSQL folds a backend's counts in within about a second:
    a reading may be off by the monitor's last two samples). The reading is itself one
    transaction there, counted by the next reading."""
    monitor = cluster.monitor_transactions()
    with psycopg.connect(cluster.database.libpq_dsn(), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0]) - monitor


def _by_thread(operator: OperatorUnderTest) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in operator.metrics().splitlines():
        match = _COUNTER_LINE.match(line)
        if match:
            counts[match.group(1)] = int(float(match.group(2)))
    return counts


def _loop_of(thread: str) -> str:
    """The runtime's threads are named achilles-<loop>; kopf's handlers run elsewhere."""
    return thread.removeprefix("achilles-") if thread.startswith("achilles-") else "kopf handlers"


def _measure(
    cluster: BenchCluster,
    progress: Progress,
    site_dir: Path,
    window_s: float,
    *,
    label: str,
    operator_path: Path | None = None,
) -> dict[str, Any]:
    path = str(site_dir) if operator_path is None else f"{site_dir}:{operator_path}"
    with running_operator(cluster, progress, runner_command=None, PYTHONPATH=path) as operator:
        time.sleep(SETTLE_S)  # its first listing, folded once, is not the idle cost
        operator.check_alive()
        threads_before = _by_thread(operator)
        requests_before = operator_request_counts(cluster)
        server_before = _server_transactions(cluster)
        progress(f"{label}: counting over {window_s:.0f} s")
        started = time.monotonic()
        cores, rss = operator.usage_over(window_s)
        server_after = _server_transactions(cluster)
        seconds = time.monotonic() - started
        threads_after = _by_thread(operator)
        requests = request_rates(requests_before, operator_request_counts(cluster), seconds)
    per_loop: dict[str, int] = {}
    for thread, count in threads_after.items():
        loop = _loop_of(thread)
        per_loop[loop] = per_loop.get(loop, 0) + count - threads_before.get(thread, 0)
    scale = 300.0 / seconds
    return {
        "transactions per 5 min (PostgreSQL)": round((server_after - server_before - 1) * scale),
        "transactions per 5 min by loop (operator)": {
            loop: round(count * scale) for loop, count in sorted(per_loop.items()) if count
        },
        "API requests per second": requests,
        "CPU cores": round(cores, 4),
        "RSS MiB": round(rss, 1),
        "window_s": round(seconds, 1),
    }


def _worktree(ref: str, work_dir: Path) -> Path:
    """The operator package of commit `ref`, checked out beside the benchmark's state."""
    tree = work_dir / "before"
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(tree), ref],
        check=True,
        capture_output=True,
        cwd=REPOSITORY,
    )
    return tree


def run(
    size: int,
    json_path: Path | None,
    *,
    window_s: float = DEFAULT_WINDOW_S,
    before: str | None = None,
) -> Report:
    progress = Progress(NAME)
    report = Report(
        benchmark=NAME,
        size=size,
        parameters={
            "finished_jobs": size,
            "window_s": window_s,
            "before": before,
            "node": "containerd (real)",
            "runner image": RUNNER_IMAGE,
        },
    )
    with bench_cluster(
        progress,
        report=report,
        max_concurrency=CONCURRENT_PODS,
        node="containerd",
    ) as cluster:
        report.details["versions"] = cluster.versions()
        site_dir = cluster.work_dir / "site"
        site_dir.mkdir()
        (site_dir / "sitecustomize.py").write_text(TRANSACTIONS_SITE)
        started = time.monotonic()
        create_all(
            [_finished_job(1_000_000 + k) for k in range(size)],
            lambda manifest: cluster.batch.create_namespaced_job(
                RUNS_NAMESPACE, cast(Any, manifest)
            ),
            progress,
            "run Jobs",
        )
        wait_until(
            lambda: _finished_jobs(cluster) >= size,
            6 * 3600,
            f"{size:,} Jobs to finish",
            progress,
            every=10,
        )
        made = time.monotonic() - started
        report.details["Jobs created and run to completion in (s)"] = round(made, 1)
        progress(f"{size:,} Jobs complete in {made:.0f} s")

        results: dict[str, dict[str, Any]] = {}
        if before is not None:
            tree = _worktree(before, cluster.work_dir)
            try:
                results["before"] = _measure(
                    cluster,
                    progress,
                    site_dir,
                    window_s,
                    label=f"before ({before})",
                    operator_path=tree / "operator",
                )
            finally:
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(tree)], check=False, cwd=REPOSITORY
                )
        results["now"] = _measure(cluster, progress, site_dir, window_s, label="now")
    report.details["idle operator"] = results
    now = results["now"]
    report.add_value(
        f"database transactions per 5 min, {size:,} finished Jobs kept, idle",
        now["transactions per 5 min (PostgreSQL)"],
        "tx",
        goal=at_most(100, "tx"),
        note="pg_stat_database of the operator's own database; by loop in the details",
    )
    for loop, count in now["transactions per 5 min by loop (operator)"].items():
        report.add_value(f"of which {loop}", count, "tx", note="the operator's own count")
    report.add_value(f"operator CPU idle, {size:,} finished Jobs", now["CPU cores"], "cores")
    if "before" in results:
        report.add_value(
            f"before ({before}): database transactions per 5 min, {size:,} finished Jobs",
            results["before"]["transactions per 5 min (PostgreSQL)"],
            "tx",
        )
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report
