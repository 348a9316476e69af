"""`achilles bench slot-to-heartbeat`: from a slot to the runner's first heartbeat, the
latency a user feels, with the real runner and the offline model server.

N agents (default 60), each due once, `SPACING_S` apart (`bench.cluster.fast_forward`
writes the slots). Each run is the whole path: scheduler -> enqueue -> dispatcher ->
Job -> the Job controller's pod -> the kubelet stand-in starts `achilles runner` as a
host process (no image pull, no container runtime: a real node adds its pod start-up)
-> the runner claims the run, which writes its first heartbeat. Measured from the
journal (`scheduled_for`, `started_at` = the claim's `heartbeat_at`) and split at the
Job's ADDED watch event: slot -> Job, Job -> first heartbeat.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

from achilles.db.database import Database
from achilles.k8s.jobs import RUN_ID_LABEL, RUN_SELECTOR
from bench.cluster import (
    RUNS_NAMESPACE,
    BenchCluster,
    agent_manifest,
    bench_cluster,
    create_agent,
    create_all,
    create_model,
    ensure_namespace,
    fast_forward,
    insert_owners,
    run_states,
    running_operator,
    scheduled_agent_ids,
    wait_until,
)
from bench.jobwatch import JobWatch
from bench.report import Progress, Report, at_most

NAME = "slot-to-heartbeat"
DEFAULT_SIZE = 60
SPACING_S = 2.0
NAMESPACE = "bench-heartbeat"
MODEL = "bench-model-server"


@contextmanager
def model_server() -> Iterator[str]:
    """`achilles model-server` on a free port; its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "achilles", "model-server", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        yield line.split("listening on ")[1].split()[0]
    finally:
        process.terminate()
        process.wait(timeout=10)


def _container_starts(cluster: BenchCluster) -> dict[int, float]:
    """When each run pod's runner container started (the kubelet's startedAt)."""
    starts = {}
    for pod in cluster.core.list_namespaced_pod(RUNS_NAMESPACE, label_selector=RUN_SELECTOR).items:
        labels = (pod.metadata.labels if pod.metadata else None) or {}
        statuses = (pod.status.container_statuses or []) if pod.status else []
        for status in statuses:
            state = status.state
            at = None
            if state is not None and state.running is not None:
                at = state.running.started_at
            elif state is not None and state.terminated is not None:
                at = state.terminated.started_at
            if at is not None and RUN_ID_LABEL in labels:
                starts[int(labels[RUN_ID_LABEL])] = at.timestamp()
    return starts


def _runner_startup(times: int) -> list[float]:
    """A fresh interpreter importing what `achilles runner` imports before its claim."""
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import achilles.services.run_execution"],
            capture_output=True,
            check=True,
        )
        samples.append(time.perf_counter() - started)
    return samples


def run(size: int, json_path: Path | None, server_url: str | None = None) -> Report:
    progress = Progress(NAME)
    report = Report(
        benchmark=NAME,
        size=size,
        parameters={"runs": size, "spacing_s": SPACING_S, "node": "kubelet stand-in"},
    )
    with (
        bench_cluster(
            progress,
            served_namespaces=(RUNS_NAMESPACE,),
            max_concurrency=size + 4,
            server_url=server_url,
        ) as cluster,
        model_server() as model_url,
    ):
        report.details["versions"] = cluster.versions()
        database = Database(cluster.database.url, pool_size=2, application_name="achilles-bench")
        try:
            insert_owners(database, size)
            ensure_namespace(cluster, NAMESPACE)
            with running_operator(
                cluster, progress, runner_command=f"{sys.executable} -m achilles runner"
            ) as operator:
                create_model(cluster, MODEL, model_url)
                schedule = {"type": "interval", "everyHours": 24}
                create_all(
                    [
                        agent_manifest(f"hb-{i}", f"owner-{i + 1}", MODEL, schedule)
                        for i in range(size)
                    ],
                    lambda m: create_agent(cluster, NAMESPACE, m),
                    progress,
                    "Agents",
                )

                def scheduled() -> list[int]:
                    operator.check_alive()
                    ids = scheduled_agent_ids(database)
                    return ids if len(ids) >= size else []

                agents = wait_until(scheduled, 600, f"{size} agents scheduled", progress)
                watcher = JobWatch(cluster.api, RUNS_NAMESPACE, RUN_SELECTOR).start()
                pod_watcher = JobWatch(cluster.api, RUNS_NAMESPACE, RUN_SELECTOR, pods=True)
                pod_watcher.start()
                first = datetime.now(UTC) + timedelta(seconds=10)
                fast_forward(
                    database,
                    {
                        agent: first + timedelta(seconds=k * SPACING_S)
                        for k, agent in enumerate(agents)
                    },
                )
                progress(f"{size} slots, {SPACING_S:g} s apart, from {first:%H:%M:%S} UTC")

                def all_claimed() -> bool:
                    operator.check_alive()
                    with database.engine.connect() as conn:
                        claimed = conn.execute(
                            text(
                                "SELECT count(*) FROM agent_runs "
                                "WHERE scheduled_for IS NOT NULL AND started_at IS NOT NULL"
                            )
                        ).scalar_one()
                    return int(claimed) >= size

                wait_until(all_claimed, size * SPACING_S + 300, f"{size} runs claimed", progress)
                jobs = {int(job.labels[RUN_ID_LABEL]): job.seen_at for job in watcher.snapshot()}
                pods = {
                    int(pod.labels[RUN_ID_LABEL]): pod.seen_at for pod in pod_watcher.snapshot()
                }
                started = _container_starts(cluster)
                watcher.stop()
                pod_watcher.stop()
            with database.engine.connect() as conn:
                rows = conn.execute(
                    text(
                        "SELECT id, scheduled_for, started_at FROM agent_runs "
                        "WHERE scheduled_for IS NOT NULL AND started_at IS NOT NULL"
                    )
                ).all()
            # Let the last runs finish talking to the model server before it stops.
            time.sleep(5)
            report.details["runs by state"] = run_states(database)
        finally:
            database.dispose()
    total = [(row.started_at - row.scheduled_for).total_seconds() for row in rows]
    to_job = [jobs[row.id] - row.scheduled_for.timestamp() for row in rows if row.id in jobs]
    job_to_beat = [row.started_at.timestamp() - jobs[row.id] for row in rows if row.id in jobs]
    report.latency(
        "slot -> first heartbeat, median", total, unit="s", goal=at_most(3, "s"), on="median"
    )
    report.latency("slot -> first heartbeat, p99", total, unit="s", goal=at_most(8, "s"))
    report.latency("slot -> Job (watch event)", to_job, unit="s")
    report.latency("Job -> first heartbeat", job_to_beat, unit="s")
    report.latency(
        "Job -> pod (watch event)",
        [pods[i] - jobs[i] for i in jobs if i in pods],
        unit="s",
        note="the Job controller makes the pod",
    )
    report.latency(
        "pod -> container started",
        [started[i] - pods[i] for i in pods if i in started],
        unit="s",
        note="the kubelet stand-in binds and starts it; startedAt has whole seconds",
    )
    report.latency(
        "container started -> first heartbeat",
        [row.started_at.timestamp() - started[row.id] for row in rows if row.id in started],
        unit="s",
        note="interpreter, imports, database connection, claim; startedAt has whole seconds",
    )
    report.latency(
        "runner start-up alone (interpreter and imports)",
        _runner_startup(5),
        unit="s",
        note="python -c 'import achilles.services.run_execution': the floor of a run's "
        "start on this machine, before any database work",
    )
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report
