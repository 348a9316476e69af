"""`achilles bench slot-to-heartbeat`: from a slot to the runner's first heartbeat, the
latency a user feels, with the real runner and the offline model server.

N agents (default 60), each due once, `--spacing` apart (default `SPACING_S`;
`bench.workload.fast_forward` writes the slots). Each run is the whole path: scheduler
-> enqueue -> dispatcher -> Job -> the Job controller's pod -> kube-scheduler binds it
-> the kubelet has containerd and runc start the pod's sandbox and the runner image's
container (`achilles runner`, the locally built image, as `achilles dev up` runs it) ->
the runner claims the run, which writes its first heartbeat; then it asks the model
server (on the host's end of the node's network) and finishes. Measured from the journal
(`scheduled_for`, `started_at` = the claim's `heartbeat_at`) and split at the Job's and
the pod's ADDED watch events and the container's start as the runtime recorded it
(nanoseconds, from `crictl inspect`): slot -> Job, Job -> container started, container
started -> first heartbeat.

The real node needs root (issue 39: no stand-in run of it any more; a path without the
container start-up a user's pods pay is not the latency a user feels).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Row, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, TEXT

from achilles.db.database import Database
from achilles.domain.runs import TERMINAL_STATES
from achilles.k8s.run_metadata import RUN_ID_LABEL, RUN_SELECTOR
from achilles_dev.config import LOOPBACK
from achilles_dev.images import RUNNER_IMAGE
from bench.cluster import RUNS_NAMESPACE, BenchCluster, bench_cluster, ensure_namespace
from bench.jobwatch import JobWatch
from bench.operator_process import running_operator
from bench.report import Progress, Report, at_most
from bench.workload import (
    agent_manifest,
    create_agent,
    create_all,
    create_model,
    fast_forward,
    insert_owners,
    run_states,
    scheduled_agent_ids,
    wait_until,
)

NAME = "slot-to-heartbeat"
DEFAULT_SIZE = 60
SPACING_S = 2.0
NAMESPACE = "bench-heartbeat"
MODEL = "bench-model-server"
NODE_NAME = "containerd (real)"


@contextmanager
def model_server(host: str = LOOPBACK) -> Iterator[str]:
    """`achilles model-server` on a free port of `host` (where the pods reach this
    host); its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "achilles", "model-server", "--host", host, "--port", "0"],
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
    """When each run pod's runner container started: as the runtime recorded it
    (nanoseconds), else the kubelet's `startedAt` (whole seconds)."""
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
            if at is None or RUN_ID_LABEL not in labels:
                continue
            started = at.timestamp()
            if status.container_id:
                started = _runtime_start(cluster, status.container_id) or started
            starts[int(labels[RUN_ID_LABEL])] = started
    return starts


def _runtime_start(cluster: BenchCluster, container_id: str) -> float | None:
    """The container's start (`crictl inspect`: RFC 3339 with nanoseconds), or None when
    the runtime no longer knows it."""
    _, _, runtime_id = container_id.partition("://")
    inspected = subprocess.run(
        cluster.stack.node().crictl("inspect", "--output", "json", runtime_id),
        capture_output=True,
        text=True,
        check=False,
    )
    if inspected.returncode != 0:
        return None
    stamp = str(json.loads(inspected.stdout)["status"]["startedAt"])
    return parse_rfc3339_nano(stamp)


def parse_rfc3339_nano(stamp: str) -> float:
    """Seconds since the epoch of `2026-01-02T03:04:05.123456789Z` (or `+00:00`):
    datetime parses at most microseconds, so the fraction is added apart."""
    whole, dot, rest = stamp.partition(".")
    if not dot:
        return datetime.fromisoformat(stamp).timestamp()
    digits = len(rest) - len(rest.lstrip("0123456789"))
    fraction, zone = rest[:digits], rest[digits:]
    return datetime.fromisoformat(whole + zone).timestamp() + float(f"0.{fraction or 0}")


# What `achilles runner` imports before its claim (the run's first heartbeat), as it
# does (`permanent_imports`), and everything it imports by the end (the agent loop's
# stack, imported after the claim).
BEFORE_CLAIM = (
    "import achilles.cli.main, achilles.cli.runner\n"
    "from achilles.runner.startup import permanent_imports\n"
    "with permanent_imports():\n"
    "    import achilles.runner.main\n"
)
WHOLE_RUNNER = BEFORE_CLAIM + "with permanent_imports():\n    import achilles.runner.execution\n"


def _runner_startup(times: int, imports: str) -> list[float]:
    """A fresh interpreter running `imports` (Python statements).

    From compiled bytecode, as the image has it (pip compiles at install; uv leaves a
    virtualenv without, and PYTHONDONTWRITEBYTECODE would make every sample compile the
    sources): one start unmeasured writes it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    argv = [sys.executable, "-c", imports]
    subprocess.run(argv, env=env, capture_output=True, check=True)
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        samples.append(time.perf_counter() - started)
    return samples


def run(size: int, json_path: Path | None, spacing_s: float = SPACING_S) -> Report:
    progress = Progress(NAME)
    parameters: dict[str, object] = {
        "runs": size,
        "spacing_s": spacing_s,
        "node": NODE_NAME,
        "runner image": RUNNER_IMAGE,
    }
    report = Report(benchmark=NAME, size=size, parameters=parameters)
    with (
        bench_cluster(
            progress,
            report=report,
            max_concurrency=size + 4,
            node="containerd",
        ) as cluster,
        model_server(cluster.host_for_pods) as model_url,
    ):
        report.details["versions"] = cluster.versions()
        database = Database(cluster.database.url, pool_size=2, application_name="achilles-bench")
        try:
            insert_owners(database, size)
            ensure_namespace(cluster, NAMESPACE)
            with running_operator(
                cluster, progress, runner_command=None, runner_image=RUNNER_IMAGE
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
                        agent: first + timedelta(seconds=k * spacing_s)
                        for k, agent in enumerate(agents)
                    },
                )
                progress(f"{size} slots, {spacing_s:g} s apart, from {first:%H:%M:%S} UTC")

                # A run whose pod never started (the node full, a start deadline) ends
                # unclaimed: it is counted in "runs by state", not waited for.
                def all_claimed_or_over() -> bool:
                    operator.check_alive()
                    return _slot_runs(database).settled >= size

                wait_until(
                    all_claimed_or_over, size * spacing_s + 300, f"{size} runs claimed", progress
                )
                jobs = {int(job.labels[RUN_ID_LABEL]): job.seen_at for job in watcher.snapshot()}
                pods = {
                    int(pod.labels[RUN_ID_LABEL]): pod.seen_at for pod in pod_watcher.snapshot()
                }
                started = _container_starts(cluster)
                watcher.stop()
                pod_watcher.stop()

                # The model server and the operator stay until every run has ended, so
                # the runs end as they would in use (and their states say how).
                def all_ended() -> bool:
                    operator.check_alive()
                    return _slot_runs(database).ended >= size

                wait_until(all_ended, 300, f"{size} runs ended", progress)
            with database.engine.connect() as conn:
                rows = conn.execute(
                    text(
                        "SELECT id, scheduled_for, started_at FROM agent_runs "
                        "WHERE scheduled_for IS NOT NULL AND started_at IS NOT NULL"
                    )
                ).all()
            report.details["runs by state"] = run_states(database)
        finally:
            database.dispose()
    report.details["load average (1, 5, 15 min) at the end"] = [
        round(load, 2) for load in os.getloadavg()
    ]
    _report_figures(report, rows, jobs, pods, started)
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report


@dataclass(frozen=True)
class SlotRuns:
    claimed: int
    ended: int
    ended_unclaimed: int

    @property
    def settled(self) -> int:
        """Claimed, or over without a claim (its pod never ran)."""
        return self.claimed + self.ended_unclaimed


def _slot_runs(database: Database) -> SlotRuns:
    """Slot-made runs (not manual ones) claimed so far, ended so far, and ended unclaimed."""
    with database.engine.connect() as conn:
        claimed, ended, unclaimed = conn.execute(
            text(
                "SELECT count(*) FILTER (WHERE started_at IS NOT NULL), "
                "count(*) FILTER (WHERE state = ANY(:terminal)), "
                "count(*) FILTER (WHERE state = ANY(:terminal) AND started_at IS NULL) "
                "FROM agent_runs WHERE scheduled_for IS NOT NULL"
            ).bindparams(bindparam("terminal", type_=ARRAY(TEXT))),
            {"terminal": sorted(state.value for state in TERMINAL_STATES)},
        ).one()
    return SlotRuns(int(claimed), int(ended), int(unclaimed))


def _report_figures(
    report: Report,
    rows: Sequence[Row[Any]],
    jobs: dict[int, float],
    pods: dict[int, float],
    started: dict[int, float],
) -> None:
    total = [(row.started_at - row.scheduled_for).total_seconds() for row in rows]
    to_job = [jobs[row.id] - row.scheduled_for.timestamp() for row in rows if row.id in jobs]
    job_to_beat = [row.started_at.timestamp() - jobs[row.id] for row in rows if row.id in jobs]
    precision = "the runtime's start (ns)"
    # Issue 20's goals (the first ones were 3 / 8 s).
    report.latency(
        "slot -> first heartbeat, median", total, unit="s", goal=at_most(1.5, "s"), on="median"
    )
    report.latency("slot -> first heartbeat, p99", total, unit="s", goal=at_most(4, "s"))
    report.latency("slot -> Job (watch event)", to_job, unit="s")
    report.latency("Job -> first heartbeat", job_to_beat, unit="s")
    report.latency(
        "Job -> container started",
        [started[i] - jobs[i] for i in jobs if i in started],
        unit="s",
        note=f"the pod made, bound and started; {precision}",
    )
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
        note=(
            "kube-scheduler binds it; the kubelet has containerd and runc start its sandbox "
            f"and the runner's container; {precision}"
        ),
    )
    report.latency(
        "container started -> first heartbeat",
        [row.started_at.timestamp() - started[row.id] for row in rows if row.id in started],
        unit="s",
        note=f"interpreter, imports, database connection, claim; {precision}",
    )
    report.latency(
        "runner start-up before the claim (interpreter and imports)",
        _runner_startup(5, BEFORE_CLAIM),
        unit="s",
        note="python -c importing the CLI and achilles.runner.main on the host, from "
        "bytecode: the floor of a run's start on this machine, before any database work",
    )
    report.latency(
        "runner start-up, every import (the agent loop's after the claim)",
        _runner_startup(5, WHOLE_RUNNER),
        unit="s",
        note="the same with achilles.runner.execution (openai, the tools): a run's whole "
        "import cost, what many runs starting together share the node's cores for",
    )
