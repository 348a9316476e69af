"""`achilles bench intake`: the operator restarted under N Agents it already took in.

N `Agent`s (default 10,000; the same population as `bench steady-state`: ten per owner,
a thousand per namespace, half interval and half calendar schedules) are created, and
the operator takes them in (create -> every row written with its slot: the first
intake, which writes a row and a status per Agent). Once its CPU is idle, its RSS and its
CPU over `--idle-window` seconds are sampled.

Then the operator is stopped, and while none runs the cluster moves on as it would
during a deployment: 5 % of the Agents get a new prompt (a new generation), 1 % are
deleted and 1 % are created. The operator is started again under them and the figure is
**restart -> all reconciled**, the later of:

- *every Agent reconciled*: every Agent's row exists and says its spec (the changed
  prompts are in the rows), no row is left of a deleted Agent, and every Agent's
  `status.observedGeneration` is its `metadata.generation` with a `databaseId` (checked
  on the touched Agents while waiting, on all of them once at the end);
- *intake drained*: the operator's CPU over the trailing `IDLE_PROBE_S` seconds is at
  most `IDLE_CORES` (kopf has handled the listing of every Agent, changed or not).

Beside it: the database transactions and `agents` row writes during the restart (an
unchanged Agent should cost none), the operator's status patches, its peak RSS, and its
RSS and CPU over the idle window after.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from sqlalchemy import text

from achilles.db.database import Database
from achilles.k8s.watching import PAGE_SIZE as LISTING_PAGE
from bench.apiserver_counts import (
    etcd_sizes,
    mean_object_bytes,
    operator_request_counts,
    request_rates,
)
from bench.cluster import (
    BenchCluster,
    bench_cluster,
)
from bench.intake_checks import (
    ListingTimeline,
    Population,
    agent_events,
    all_observed,
    listed_count,
    rows_agree,
    touched_reconciled,
)
from bench.intake_memory import memory_figures, probe_env
from bench.intake_population import (
    ADDED_FRACTION,
    CHANGED_FRACTION,
    DELETED_FRACTION,
    create_agents,
    move_on,
)
from bench.intake_usage import IDLE_CORES, IDLE_PROBE_S, cpu_between, idle_since, listing_alone
from bench.operator_process import OperatorUnderTest, running_operator
from bench.report import Progress, Report, at_most
from bench.steady import AGENTS_PER_OWNER, MODEL
from bench.workload import (
    create_model,
    insert_owners,
    scheduled_agent_ids,
    wait_until,
)

NAME = "intake"
DEFAULT_SIZE = 10_000
IDLE_WINDOW_S = 60.0
INTAKE_TIMEOUT_S = 3 * 3600.0


def _database_counters(cluster: BenchCluster, database: Database) -> dict[str, int]:
    """Transactions committed in the benchmark's database less the invariant monitor's
    own (within its last two samples: PostgreSQL folds a backend's counts in within about
    a second), and `agents` row writes."""
    monitor = cluster.monitor_transactions()
    with database.engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        commits = conn.execute(
            text("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        ).scalar_one()
        writes = conn.execute(
            text(
                "SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables "
                "WHERE relname = 'agents'"
            )
        ).scalar_one()
    return {"transactions": int(commits) - monitor, "agents row writes": int(writes)}


def _wait_idle(operator: OperatorUnderTest, since: float, what: str, progress: Progress) -> float:
    def idle() -> float | None:
        operator.check_alive()
        return idle_since(list(operator.samples), since)

    at: float = wait_until(idle, INTAKE_TIMEOUT_S, what, progress, every=1)
    return at


def run(
    size: int,
    json_path: Path | None,
    server_url: str | None = None,
    *,
    idle_window_s: float = IDLE_WINDOW_S,
    operator_env: dict[str, str] | None = None,
    memory_probe: bool = False,
    tracemalloc: bool = False,
    compare_env: dict[str, str] | None = None,
) -> Report:
    """`memory_probe`: sample the operator's memory from inside (bench/memory_probe), and
    after each intake measure what malloc_trim(0) gives back; `tracemalloc` also traces
    the Python heap (slow: for the diagnosis, not for the timings); `compare_env`:
    restart a second time, nothing changed, with these variables added."""
    progress = Progress(NAME)
    report = Report(
        benchmark=NAME,
        size=size,
        parameters={
            "agents": size,
            "agents_per_owner": AGENTS_PER_OWNER,
            "changed_while_down": math.ceil(size * CHANGED_FRACTION),
            "deleted_while_down": math.ceil(size * DELETED_FRACTION),
            "added_while_down": math.ceil(size * ADDED_FRACTION),
            "idle": f"CPU <= {IDLE_CORES} cores over {IDLE_PROBE_S:g} s",
            "idle_window_s": idle_window_s,
            "operator_env": operator_env or {},
            "memory_probe": memory_probe or tracemalloc,
            "tracemalloc": tracemalloc,
            "compare_env": compare_env or {},
        },
    )
    owners = math.ceil(size * (1 + ADDED_FRACTION) / AGENTS_PER_OWNER)
    population = Population()
    env = operator_env or {}
    with bench_cluster(
        progress,
        report=report,
        max_concurrency=10,
        server_url=server_url,
    ) as cluster:
        report.details["versions"] = cluster.versions()
        if memory_probe or tracemalloc:
            env = env | probe_env(cluster, tracemalloc)
        database = Database(cluster.database.url, pool_size=2, application_name="achilles-bench")
        try:
            insert_owners(database, owners)
            with running_operator(cluster, progress, runner_command="/bin/true", **env) as op:
                create_model(cluster, MODEL, "http://127.0.0.1:9/v1")
                started = time.monotonic()
                took = create_agents(cluster, population, range(size), owners, progress)
                report.add_value(
                    f"create {size:,} Agents (8 clients)",
                    size / took,
                    "Agents/s",
                    note="the API server and etcd beside the operator taking them in",
                )

                def scheduled() -> bool:
                    op.check_alive()
                    return len(scheduled_agent_ids(database)) >= size

                wait_until(scheduled, INTAKE_TIMEOUT_S, f"{size:,} rows", progress, every=2)
                first = time.monotonic() - started
                report.add_value(
                    "first intake: create -> every row and slot written",
                    first,
                    "s",
                    note=f"{size / first:.0f} Agents/s: new Agents, a row and a status each",
                )
                _wait_idle(op, time.monotonic(), "the operator to be idle", progress)
                cores, rss = op.usage_over(idle_window_s)
                report.add_value(
                    f"operator RSS after the first intake, {size:,} Agents", rss, "MiB"
                )
                report.add_value("operator CPU idle after the first intake", cores, "cores")
                progress(f"first intake {first:.0f} s; RSS {rss:.0f} MiB, CPU {cores:.3f}")
                memory_figures(report, cluster, "after the first intake", progress)
            report.details["etcd"] = {
                **etcd_sizes(cluster),
                "agent_json_bytes": round(mean_object_bytes(cluster, "agents")),
            }
            move_on(cluster, population, size, owners, progress)
            listed, seconds = listing_alone(cluster)
            report.add_value(
                f"the API server alone: list {listed:,} Agents in pages of {LISTING_PAGE}, decoded",
                seconds,
                "s",
                note="kopf's listing at a start, without kopf or operator: the restart's floor",
            )
            _restart(report, cluster, database, population, size, idle_window_s, env, progress)
            if compare_env:
                # Again under the same Agents, nothing changed, with other settings.
                label = "restart with " + " ".join(f"{k}={v}" for k, v in compare_env.items())
                env = env | compare_env
                _restart(
                    report, cluster, database, population, size, idle_window_s, env, progress, label
                )
        finally:
            database.dispose()
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report


def _restart(
    report: Report,
    cluster: BenchCluster,
    database: Database,
    population: Population,
    size: int,
    idle_window_s: float,
    env: dict[str, str],
    progress: Progress,
    label: str = "restart",
) -> None:
    """Start the operator under the Agents and measure its intake; figures named
    `label` (the goals apply to the first restart only)."""
    goals = label == "restart"
    counters = _database_counters(cluster, database)
    requests = operator_request_counts(cluster)
    with running_operator(cluster, progress, runner_command="/bin/true", **env) as op:
        started = time.monotonic()
        timeline = ListingTimeline(started, len(population.agents))

        def reconciled() -> bool:
            op.check_alive()
            events = agent_events(op)
            timeline.saw(events)
            return (
                listed_count(events) >= len(population.agents)
                and rows_agree(database, population)
                and touched_reconciled(cluster, population)
            )

        wait_until(reconciled, INTAKE_TIMEOUT_S, "every Agent reconciled", progress, every=1)
        rows_done = time.monotonic() - started
        idle_at = _wait_idle(op, started, "the intake to drain (CPU idle)", progress)
        drained = idle_at - started
        seconds = time.monotonic() - started
        after_counters = _database_counters(cluster, database)
        rates = request_rates(requests, operator_request_counts(cluster), seconds)
        peak = max(s.rss_mib for s in op.samples if s.at >= started)
        agents, behind = all_observed(cluster)
        if agents != len(population.agents) or behind:
            raise RuntimeError(f"{behind} of {agents} Agents not reconciled after the restart")
        goal = (at_most(30, "s") if size <= 10_000 else at_most(300, "s")) if goals else None
        total = max(rows_done, drained)
        report.add_value(
            f"{label} -> all reconciled",
            total,
            "s",
            goal=goal,
            note="the later of: every Agent handled and the changes written; CPU idle",
        )
        report.add_value(
            f"{label} -> every listed Agent handled, changes in the rows and statuses",
            rows_done,
            "s",
        )
        events = agent_events(op)
        report.details[f"Agent events during the {label}"] = events
        report.details[f"{label}: seconds to each step of the listing"] = timeline.steps
        for outcome in ("unchanged", "reconciled", "echo"):
            count = events.get(f"listed/{outcome}", 0)
            report.add_value(f"{label}: listed Agents {outcome}", count, "")
        report.add_value(
            f"{label} -> intake drained (CPU <= {IDLE_CORES:g} over {IDLE_PROBE_S:g} s)",
            drained,
            "s",
        )
        for name, value in after_counters.items():
            report.add_value(
                f"{label}: database {name}", value - counters[name], "", note="whole database"
            )
        report.add_value(
            f"{label}: operator patch requests",
            round(rates["patch"] * seconds),
            "",
            note="status and spec, all kinds",
        )
        report.add_value(f"{label}: operator peak RSS", peak, "MiB")
        report.add_value(
            f"{label}: operator CPU until drained",
            cpu_between(op.samples, started, idle_at),
            "core-s",
            note="its work, less sensitive than the seconds to what else the host runs",
        )
        cores, rss = op.usage_over(idle_window_s)
        # Flat whatever the number of Agents (issue 40): the operator keeps no object each.
        rss_goal = at_most(256, "MiB") if goals else None
        report.add_value(
            f"operator RSS after the {label}, {size:,} Agents", rss, "MiB", goal=rss_goal
        )
        report.add_value(
            f"operator CPU idle after the {label}, {size:,} Agents",
            cores,
            "cores",
            goal=at_most(0.05, "cores") if goals else None,
        )
        memory_figures(report, cluster, f"after the {label}", progress)
        report.details[f"operator requests during the {label}"] = {
            verb: round(rate * seconds) for verb, rate in rates.items()
        }
        progress(
            f"{label}: reconciled {rows_done:.1f} s, drained {drained:.1f} s; "
            f"RSS {rss:.0f} MiB, CPU {cores:.3f}"
        )
