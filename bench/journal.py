"""`achilles bench journal`: the run journal on a real PostgreSQL at production size.

`--size` is the number of historical `agent_runs` rows (default 10 M); the rest scales
with it: owners = size/1000 (10 k), agents = size/100 (100 k, ten per owner), running
rows for the reaper = agents/10 (10 k, 1 % of them stale). Everything is generated in
the database with `generate_series` (history in time order, each run of a random
agent, as a year of appends would lay it out), then VACUUM ANALYZE, as autovacuum
would have left an old table. Measured, each through the engine's own functions:

- enqueue through the start gates (`enqueue_run`, as the scheduler calls it: batches of
  `scheduler.BATCH` in one transaction) versus a raw single-row INSERT into the same
  table in the same batches (the ceiling): throughput and their ratio;
- the weekly-budget query (`weekly_tokens_used`) for random owners, over the last
  complete week (a full week of rows: the end-of-week worst case) and the current one;
- the reaper sweep (`reap_stale_runs`) over the running rows;
- the scheduler: the due-agent scan (`take_due_agents`) with none and with a burst due,
  the idle tick (`schedule_due_agents`), and a tick that enqueues a burst;
- the dispatcher's queries (`take_dispatchable_runs`, `count_executing`,
  `count_waiting`) and the status writer's (`agent_status_rows`).

Each query's EXPLAIN (ANALYZE, BUFFERS) is saved in the result. Measurements that
write are rolled back, so a repeat sees the same rows.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal.runs import reap_stale_runs
from achilles.db.journal.settings import database_now, load_settings
from achilles.db.journal.usage import weekly_tokens_used
from achilles.db.roles import Component
from achilles.domain.budget import week_window
from achilles.services.db_roles import grant_login_url
from bench.journal_data import RUNNING_ROWS_SQL, AgentBlocks, Sizes, load
from bench.journal_enqueue import forget_runs_of, measure_enqueue
from bench.journal_loops import measure_dispatcher, measure_scheduler, measure_status
from bench.pg import bench_database
from bench.report import Progress, Report, at_most
from bench.sql import (
    captured,
    plan_of,
    repeat_rolled_back,
    rolled_back,
    server_seconds,
    table_sizes,
    timed,
)

NAME = "journal"
DEFAULT_SIZE = 10_000_000


# --- measurements ---------------------------------------------------------------------


def measure_budget(report: Report, database: Database, sizes: Sizes, progress: Progress) -> None:
    rng = random.Random(12)
    owners = [rng.randint(1, sizes.owners) for _ in range(sizes.samples)]
    with rolled_back(database) as session:
        now = database_now(session)
        zone = load_settings(session).zone
    windows = {
        "last complete week": week_window(now - timedelta(days=7), zone),
        "current week": week_window(now, zone),
    }
    for label, window in windows.items():
        with rolled_back(database) as session:
            rows_in_window = session.execute(
                text(
                    "SELECT count(*) FROM agent_runs "
                    "WHERE finished_at >= :start AND finished_at < :end"
                ),
                {"start": window.start, "end": window.end},
            ).scalar_one()
            samples = [timed(weekly_tokens_used, session, owner, window)[0] for owner in owners]
        report.latency(
            f"budget query ({label})",
            samples,
            goal=at_most(10, "ms"),
            note=f"{rows_in_window:,} runs of all owners finished in the window",
        )
        progress(f"budget query, {label}: {len(samples)} owners sampled")
    report.details.setdefault("plans", {})["budget query (last complete week)"] = plan_of(
        database,
        lambda s: weekly_tokens_used(s, owners[0], windows["last complete week"]),
        "sum(agent_runs.tokens_used)",
    )
    # The same query as PostgreSQL alone times it, for 1 in 10 of the sampled owners.
    sql, params = captured(
        database,
        lambda s: weekly_tokens_used(s, owners[0], windows["last complete week"]),
        "sum(agent_runs.tokens_used)",
    )
    key = next(k for k, v in params.items() if v == owners[0])
    report.latency(
        "budget query (last complete week), in PostgreSQL",
        server_seconds(database, sql, [{**params, key: o} for o in owners[::10]]),
        goal=at_most(10, "ms"),
        note="EXPLAIN ANALYZE execution time: the query without client and scheduling",
    )


def measure_reaper(
    report: Report, database: Database, admin: Database, sizes: Sizes, progress: Progress
) -> None:
    with admin.engine.begin() as conn:  # ANALYZE: the tables' owner
        conn.execute(text(RUNNING_ROWS_SQL), {"running": sizes.running})
        conn.execute(text("ANALYZE agent_runs"))
    expected = sizes.running // 100

    def sweep(session: Session) -> None:
        reaped = reap_stale_runs(session)
        if len(reaped) != expected:
            raise RuntimeError(f"reaper found {len(reaped)} stale runs, expected {expected}")

    samples = repeat_rolled_back(database, sizes.repeats, sweep)
    report.latency(
        "reaper sweep",
        samples,
        goal=at_most(50, "ms"),
        note=f"{sizes.running:,} running rows, {expected:,} stale, beside the history",
    )
    report.details.setdefault("plans", {})["reaper sweep"] = plan_of(
        database, lambda s: reap_stale_runs(s), "UPDATE agent_runs"
    )
    sql, params = captured(database, lambda s: reap_stale_runs(s), "UPDATE agent_runs")
    report.latency(
        "reaper sweep, in PostgreSQL",
        server_seconds(database, sql, [params] * min(sizes.repeats, 50)),
        goal=at_most(50, "ms"),
        note="EXPLAIN ANALYZE execution time (each rolled back)",
    )
    progress(f"reaper: {sizes.repeats} sweeps of {sizes.running:,} running rows")


# The operator's login of the benchmark's database (the server is the benchmark's own or
# a scratch one; the role is cluster-wide and kept, like the group roles).
OPERATOR_LOGIN = "achilles_bench_operator"


def run(
    size: int, json_path: Path | None, server_url: str | None = None, *, as_owner: bool = False
) -> Report:
    progress = Progress(NAME)
    sizes = Sizes.for_runs(size)
    report = Report(benchmark=NAME, size=size, parameters=asdict(sizes))
    progress(f"sizes: {asdict(sizes)}")
    with bench_database(progress, server_url) as target:
        report.details["postgresql"] = target.server
        # Loaded and vacuumed by the tables' owner; measured as the operator's login,
        # under its grants and row-level security, as the operator runs (issue 24).
        admin = Database(target.url, pool_size=2, application_name="achilles-bench")
        database = None
        try:
            report.details["load_seconds"] = load(admin, sizes, progress)
            report.details["table_sizes"] = table_sizes(admin, ("agent_runs", "agents", "users"))
            progress(f"tables: {report.details['table_sizes']}")
            url = target.url
            if not as_owner:
                url = grant_login_url(
                    admin, Component.OPERATOR, OPERATOR_LOGIN, secrets.token_urlsafe(24)
                )
            report.details["measured_as"] = "the tables' owner" if as_owner else OPERATOR_LOGIN
            database = Database(url, pool_size=2, application_name="achilles-bench")
            blocks = AgentBlocks(next_id=sizes.running + 1)  # 1..running: the reaper's
            measure_budget(report, database, sizes, progress)
            measure_reaper(report, database, admin, sizes, progress)
            measure_enqueue(report, database, sizes, blocks, progress)
            forget_runs_of(admin, sizes.running + 1, blocks.next_id - 1)
            measure_scheduler(report, database, sizes, blocks, progress)
            measure_dispatcher(report, database, sizes, progress)
            measure_status(report, database, sizes, progress)
        finally:
            if database is not None:
                database.dispose()
            admin.dispose()
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report
