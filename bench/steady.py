"""`achilles bench steady-state`: the operator at 10,000 Agents with slots every second.

N `Agent`s (default 10,000; ten per owner, a thousand per namespace), half interval
(every 2..24 h) and half calendar (daily, at minutes spread from two hours ahead), so
no slot of theirs falls during the benchmark by itself. The operator takes them in at
1k, 5k, 10k (those below N) and N; at each, once it has given every agent its slot, its
RSS and CPU are sampled from /proc for `IDLE_WINDOW_S` and its API requests counted by verb (its own
ServiceAccount, counted by the API server's flow-control metrics).

Then the steady load: `--rate` slots per second for `--duration` seconds, written into
`next_run_at` (`bench.workload.fast_forward`; the CRs' own slots are minutes or hours
apart). Each run's pod is a container of the runner image on the real node (root; issue
39: no longer a host process) running a scripted runner (`SCRIPTED_RUNNER`: the claim and
the success the runner writes first and last, through psycopg, no model call), so runs
finish and the operator folds real pod and Job outcomes. Measured: slot -> Job (the
ADDED watch event; the slot is the Job's scheduled-for annotation), the operator's RSS
and CPU, and its API requests per second by verb.
"""

from __future__ import annotations

import math
import random
import shlex
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from achilles.db.database import Database
from achilles.k8s.run_metadata import RUN_SELECTOR, SLOT_ANNOTATION
from achilles_dev.images import RUNNER_IMAGE
from bench.apiserver_counts import (
    etcd_sizes,
    mean_object_bytes,
    operator_request_counts,
    request_rates,
)
from bench.cluster import RUNS_NAMESPACE, BenchCluster, bench_cluster, ensure_namespace
from bench.jobwatch import JobWatch
from bench.operator_process import OperatorUnderTest, running_operator
from bench.report import Progress, Report, at_most
from bench.workload import (
    agent_manifest,
    create_agent,
    create_all,
    create_model,
    fast_forward,
    insert_owners,
    report_timeline,
    run_states,
    scheduled_agent_ids,
    wait_until,
)

NAME = "steady-state"
DEFAULT_SIZE = 10_000
DEFAULT_RATE = 2.0  # slots per second
DEFAULT_DURATION_S = 240.0
AGENTS_PER_OWNER = 10
AGENTS_PER_NAMESPACE = 1000
CHECKPOINTS = (1000, 5000, 10_000)
# Creating Agents runs at 25-30 a second on the 2-core host beside the operator taking
# them in: the wait for a step allows a tenth of a second per Agent (100,000: 2.8 h).
SECONDS_PER_AGENT = 0.1
IDLE_WINDOW_S = 30.0
MODEL = "bench"

# The scripted runner: what `achilles runner` writes first and last, nothing between, as
# the runner's login with the run's id and secret in its session (as the runner does),
# each statement a transaction of its own. Run by the runner image's python as
# `python -c SCRIPTED_RUNNER --run-id N` (the Job's args), so a run costs a container
# start and two statements, not the runner's imports and a model call.
SCRIPTED_RUNNER = """\
import os, sys
import psycopg
run_id = int(sys.argv[2])
url = os.environ["ACHILLES_DATABASE_URL"].replace("+psycopg", "", 1)
secret = os.environ["ACHILLES_RUN_SECRET"]
options = f"-c achilles.run_id={run_id} -c achilles.run_secret={secret}"
with psycopg.connect(url, options=options, autocommit=True) as connection:
    connection.execute("SELECT achilles_claim_run(%s)", (run_id,))
    connection.execute(
        "UPDATE agent_runs SET state = 'succeeded', output = 'bench', finished_at = now()"
        " WHERE id = %s AND state = 'running'",
        (run_id,),
    )
"""
RUNNER_COMMAND = f"python -c {shlex.quote(SCRIPTED_RUNNER)}"


def _schedule(index: int, now: datetime) -> dict[str, object]:
    if index % 2 == 0:
        return {"type": "interval", "everyHours": 2 + index % 23}
    at = now + timedelta(hours=2, minutes=index % 600)
    return {"type": "calendar", "cadence": "daily", "time": f"{at:%H:%M}"}


def _namespace(index: int) -> str:
    return f"bench-agents-{index // AGENTS_PER_NAMESPACE}"


def _take_in(
    cluster: BenchCluster,
    database: Database,
    operator: OperatorUnderTest,
    first: int,
    last: int,
    owners: int,
    progress: Progress,
) -> float:
    """Create Agents first..last-1 and wait until the operator has scheduled them all;
    the seconds from the first create to the last slot written."""
    now = datetime.now(UTC)
    for namespace in sorted({_namespace(i) for i in range(first, last)}):
        ensure_namespace(cluster, namespace)
    manifests = [
        (
            _namespace(i),
            agent_manifest(f"agent-{i}", f"owner-{1 + i % owners}", MODEL, _schedule(i, now)),
        )
        for i in range(first, last)
    ]
    started = time.monotonic()
    create_all(manifests, lambda item: create_agent(cluster, *item), progress, "Agents")

    def scheduled() -> bool:
        operator.check_alive()
        return len(scheduled_agent_ids(database)) >= last

    timeout = max(1800.0, (last - first) * SECONDS_PER_AGENT)
    wait_until(scheduled, timeout, f"the operator to schedule {last:,} agents", progress, every=2)
    return time.monotonic() - started


def _idle(
    report: Report, cluster: BenchCluster, operator: OperatorUnderTest, crs: int, window_s: float
) -> tuple[float, float]:
    report.details.setdefault("etcd", {})[str(crs)] = {
        **etcd_sizes(cluster),
        "agent_json_bytes": round(mean_object_bytes(cluster, "agents")),
    }
    before = operator_request_counts(cluster)
    started = time.monotonic()
    cores, rss = operator.usage_over(window_s)
    rates = request_rates(before, operator_request_counts(cluster), time.monotonic() - started)
    report.details.setdefault("operator requests per second, idle", {})[str(crs)] = rates
    return cores, rss


def run(
    size: int,
    json_path: Path | None,
    *,
    rate: float = DEFAULT_RATE,
    duration: float = DEFAULT_DURATION_S,
    idle_window_s: float = IDLE_WINDOW_S,
    operator_env: dict[str, str] | None = None,
) -> Report:
    progress = Progress(NAME)
    slots_total = max(1, round(rate * duration))
    if slots_total > size:
        raise ValueError(f"{slots_total} slots need at least as many agents (size {size})")
    report = Report(
        benchmark=NAME,
        size=size,
        parameters={
            "agents": size,
            "slots_per_second": rate,
            "duration_s": duration,
            "slots": slots_total,
            "agents_per_owner": AGENTS_PER_OWNER,
            "idle_window_s": idle_window_s,
            "operator_env": operator_env or {},
            "node": "containerd (real)",
            "runner image": RUNNER_IMAGE,
        },
    )
    owners = math.ceil(size / AGENTS_PER_OWNER)
    checkpoints = sorted({c for c in CHECKPOINTS if c < size} | {size})
    with bench_cluster(
        progress,
        report=report,
        max_concurrency=slots_total + 10,
        node="containerd",
    ) as cluster:
        report.details["versions"] = cluster.versions()
        database = Database(cluster.database.url, pool_size=2, application_name="achilles-bench")
        try:
            insert_owners(database, owners)
            with running_operator(
                cluster,
                progress,
                runner_command=RUNNER_COMMAND,
                runner_image=RUNNER_IMAGE,
                **(operator_env or {}),
            ) as operator:
                create_model(cluster, MODEL, "http://127.0.0.1:9/v1")
                time.sleep(5)
                cores, rss = _idle(report, cluster, operator, 0, idle_window_s)
                report.add_value("operator RSS, 0 Agents", rss, "MiB")
                created = 0
                for checkpoint in checkpoints:
                    took = _take_in(
                        cluster, database, operator, created, checkpoint, owners, progress
                    )
                    report.add_value(
                        f"operator intake, Agents {created:,}..{checkpoint:,}",
                        (checkpoint - created) / took,
                        "Agents/s",
                        note="create -> row and slot written",
                    )
                    created = checkpoint
                    time.sleep(10)  # the status writes of the last agents settle
                    cores, rss = _idle(report, cluster, operator, checkpoint, idle_window_s)
                    goal = at_most(256, "MiB") if checkpoint == size else None
                    report.add_value(f"operator RSS, {checkpoint:,} Agents", rss, "MiB", goal=goal)
                    report.add_value(f"operator CPU idle, {checkpoint:,} Agents", cores, "cores")
                    progress(f"{checkpoint:,} Agents: RSS {rss:.0f} MiB, CPU {cores:.2f} cores")
                _steady(report, cluster, database, operator, size, rate, slots_total, progress)
                report.details["operator metrics"] = [
                    line
                    for line in operator.metrics().splitlines()
                    if line.startswith("achilles_") and not line.startswith("#")
                ]
            report.details["runs by state"] = run_states(database)
        finally:
            database.dispose()
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report


def _steady(
    report: Report,
    cluster: BenchCluster,
    database: Database,
    operator: OperatorUnderTest,
    size: int,
    rate: float,
    slots_total: int,
    progress: Progress,
) -> None:
    agents = random.Random(3).sample(scheduled_agent_ids(database), slots_total)
    watcher = JobWatch(cluster.api, RUNS_NAMESPACE, RUN_SELECTOR).start()
    first = datetime.now(UTC) + timedelta(seconds=10)
    slots = {agent: first + timedelta(seconds=k / rate) for k, agent in enumerate(agents)}
    last = max(slots.values())
    fast_forward(database, slots)
    progress(
        f"{slots_total} slots from {first:%H:%M:%S} to {last:%H:%M:%S} UTC "
        f"({rate:g}/s over {size:,} Agents)"
    )
    before = operator_request_counts(cluster)
    started = time.monotonic()
    samples_from = len(operator.samples)
    window = (last - datetime.now(UTC)).total_seconds()
    cores, rss = operator.usage_over(max(1.0, window))
    seconds = time.monotonic() - started
    rates = request_rates(before, operator_request_counts(cluster), seconds)

    def all_created() -> bool:
        operator.check_alive()
        return watcher.count() >= slots_total

    wait_until(all_created, 300, f"{slots_total} Jobs", progress)
    jobs = watcher.snapshot()
    watcher.stop()

    def all_ended() -> bool:
        """The runs' states are reported once they ended, the operator still there to
        fold their pods (its stop no longer gives them the seconds it used to take)."""
        operator.check_alive()
        return not run_states(database).keys() & {"queued", "running"}

    wait_until(all_ended, 300, f"the {slots_total} runs to end", progress)
    latencies = [
        job.seen_at - datetime.fromisoformat(job.annotations[SLOT_ANNOTATION]).timestamp()
        for job in jobs
        if SLOT_ANNOTATION in job.annotations
    ]
    report.latency(
        "slot -> Job (watch event)",
        latencies,
        unit="s",
        goal=at_most(2, "s"),
        note=f"{rate:g} slots/s, {len(latencies)} slots among {size:,} Agents",
    )
    report_timeline(report, database, jobs)
    report.add_value(
        f"operator RSS under load, {size:,} Agents", rss, "MiB", goal=at_most(256, "MiB")
    )
    report.add_value(
        f"operator CPU under load, {size:,} Agents", cores, "cores", goal=at_most(0.5, "cores")
    )
    report.details["operator requests per second, steady load"] = rates
    report.details["operator RSS samples (MiB), steady load"] = [
        round(s.rss_mib, 1) for s in operator.samples[samples_from:]
    ]
    for verb in ("watch", "list", "get", "create", "patch", "delete"):
        report.add_value(f"operator API {verb} requests, steady load", rates[verb], "req/s")
    progress(f"steady load: {len(latencies)} Jobs, RSS {rss:.0f} MiB, CPU {cores:.2f} cores")
