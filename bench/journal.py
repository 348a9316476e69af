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
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import dispatch as queue
from achilles.db.journal import schedule as schedule_rows
from achilles.db.journal.runs import enqueue_run, reap_stale_runs
from achilles.db.journal.settings import database_now, load_settings
from achilles.db.journal.status import agent_status_rows, agents_of_owners
from achilles.db.journal.usage import weekly_tokens_used
from achilles.db.roles import Component
from achilles.domain.budget import week_window
from achilles.domain.runs import RunTrigger
from achilles.services import dispatch as dispatch_service
from achilles.services import scheduler
from achilles.services.db_roles import grant_login_url
from bench.journal_data import ROUNDS, RUNNING_ROWS_SQL, Sizes, load
from bench.pg import bench_database
from bench.report import Progress, Report, at_least, at_most
from bench.sql import (
    captured,
    captured_sql,
    plan_of,
    rolled_back,
    server_seconds,
    shorten,
    table_sizes,
    timed,
)

NAME = "journal"
DEFAULT_SIZE = 10_000_000


# --- measurements ---------------------------------------------------------------------


@dataclass
class AgentBlocks:
    """Disjoint ranges of agent ids, so no measurement meets another's active run."""

    next_id: int

    def take(self, count: int) -> list[int]:
        block = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        return block


Insert = Callable[[Session, int, datetime], None]


def _enqueue_round(
    database: Database, agent_ids: list[int], insert: Insert
) -> tuple[float, list[float]]:
    """Enqueue one run per agent in batches of the scheduler's size; wall seconds and
    the seconds each call took."""
    latencies: list[float] = []
    started = time.perf_counter()
    for first in range(0, len(agent_ids), scheduler.BATCH):
        with database.transaction() as session:
            now = database_now(session)
            for agent_id in agent_ids[first : first + scheduler.BATCH]:
                took, _ = timed(insert, session, agent_id, now)
                latencies.append(took)
    return time.perf_counter() - started, latencies


def _raw_insert(session: Session, agent_id: int, now: datetime) -> None:
    session.execute(
        text(
            "INSERT INTO agent_runs (agent_id, trigger, state, created_at, scheduled_for) "
            "VALUES (:agent_id, 'scheduled', 'queued', :now, :now)"
        ),
        {"agent_id": agent_id, "now": now},
    )


def _gated_insert(session: Session, agent_id: int, now: datetime) -> None:
    # As the scheduler calls it: the platform settings read once per batch.
    settings = session.info.get("bench_settings")
    if settings is None:
        settings = session.info["bench_settings"] = load_settings(session)
    result = enqueue_run(
        session, agent_id, RunTrigger.SCHEDULED, now=now, scheduled_for=now, settings=settings
    )
    if not result.is_queued:
        raise RuntimeError(f"agent {agent_id}: expected a queued run, got {result}")


def measure_enqueue(
    report: Report, database: Database, sizes: Sizes, blocks: AgentBlocks, progress: Progress
) -> None:
    raw_walls: list[float] = []
    gated_walls: list[float] = []
    raw_lat: list[float] = []
    gated_lat: list[float] = []
    n = sizes.enqueue_per_round
    for round_no in range(1, ROUNDS + 1):
        wall, lat = _enqueue_round(database, blocks.take(n), _raw_insert)
        raw_walls.append(wall)
        raw_lat += lat
        wall, lat = _enqueue_round(database, blocks.take(n), _gated_insert)
        gated_walls.append(wall)
        gated_lat += lat
        progress(
            f"enqueue round {round_no}/{ROUNDS}: raw {n / raw_walls[-1]:,.0f}/s, "
            f"gated {n / gated_walls[-1]:,.0f}/s"
        )
    raw_rate = n * ROUNDS / sum(raw_walls)
    gated_rate = n * ROUNDS / sum(gated_walls)
    report.add_value("enqueue: raw INSERT (ceiling)", raw_rate, "runs/s")
    report.add_value("enqueue: through the gates", gated_rate, "runs/s")
    report.add_value(
        "enqueue: gates / raw",
        100 * gated_rate / raw_rate,
        "%",
        goal=at_least(50, "%"),
        note=f"{ROUNDS} alternating rounds of {n:,} runs, {scheduler.BATCH} per transaction",
    )
    report.latency("enqueue: raw INSERT, per run", raw_lat)
    report.latency("enqueue: through the gates, per run", gated_lat)
    probe = blocks.take(1)[0]
    with captured_sql(database) as statements, rolled_back(database) as session:
        _gated_insert(session, probe, database_now(session))
    report.details["statements of one gated enqueue"] = [
        shorten(sql) for sql, _ in statements if sql != "SELECT 1"
    ]


def _forget_runs_of(database: Database, first_agent: int, last_agent: int) -> None:
    """Remove the enqueue rounds' runs (and VACUUM, as autovacuum would), so the later
    measurements see the running rows and their own queue only."""
    with database.engine.begin() as conn:
        conn.execute(
            text(
                "DELETE FROM agent_runs WHERE agent_id BETWEEN :first AND :last "
                "AND state = 'queued'"
            ),
            {"first": first_agent, "last": last_agent},
        )
    with database.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM (ANALYZE) agent_runs"))


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

    samples = _repeat_rolled_back(database, sizes.repeats, sweep)
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


def _repeat_rolled_back(
    database: Database, repeats: int, work: Callable[[Session], object]
) -> list[float]:
    samples = []
    for attempt in range(repeats + 1):
        with rolled_back(database) as session:
            took = timed(work, session)[0]
        if attempt:  # the first one warms the statement cache
            samples.append(took)
    return samples


def _due_scan(session: Session) -> object:
    return schedule_rows.take_due_agents(session, database_now(session), scheduler.BATCH)


def measure_scheduler(
    report: Report, database: Database, sizes: Sizes, blocks: AgentBlocks, progress: Progress
) -> None:
    plans = report.details.setdefault("plans", {})
    report.latency(
        "due-agent scan, none due",
        _repeat_rolled_back(database, sizes.repeats, _due_scan),
        note=f"{sizes.agents:,} agents, next_run_at spread over the next day",
    )
    report.latency(
        "scheduler tick, nothing due",
        [
            timed(scheduler.schedule_due_agents, database, repair=False)[0]
            for _ in range(sizes.repeats)
        ],
        note="schedule_due_agents without the repair: due scan and nearest slot",
    )
    report.latency(
        "scheduler repair pass",
        [timed(scheduler.schedule_due_agents, database)[0] for _ in range(sizes.repeats)],
        note="the tick with the slot repair (closed locks, missing slots, moved zones), "
        "which the operator runs at most every 15 s",
    )
    with captured_sql(database) as statements:
        scheduler.schedule_due_agents(database)
    report.details["scheduler tick statements"] = [shorten(sql) for sql, _ in statements]
    plans["scheduler: agents to reschedule"] = plan_of(
        database,
        lambda s: schedule_rows.take_agents_to_reschedule(s, scheduler.BATCH),
        "IS DISTINCT FROM",
    )
    plans["scheduler: clear closed schedules"] = plan_of(
        database, lambda s: schedule_rows.clear_closed_schedules(s), "UPDATE agents"
    )
    progress("scheduler: idle tick measured")

    burst_walls = []
    for round_no in range(1, ROUNDS + 1):
        due = blocks.take(sizes.due)
        with database.engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE agents SET next_run_at = now() - interval '1 second' "
                    "WHERE id BETWEEN :first AND :last"
                ),
                {"first": due[0], "last": due[-1]},
            )
        if round_no == 1:
            report.latency(
                f"due-agent scan, {sizes.due:,} due",
                _repeat_rolled_back(database, sizes.repeats, _due_scan),
                note=f"takes a batch of {scheduler.BATCH}",
            )
            plans["due-agent scan"] = plan_of(database, _due_scan, "FOR UPDATE")
        took, tick = timed(scheduler.schedule_due_agents, database)
        queued = sum(1 for _, outcome in tick.enqueued if outcome.is_queued)
        if queued != sizes.due:
            raise RuntimeError(f"burst tick queued {queued} runs, expected {sizes.due}")
        burst_walls.append(took)
        progress(f"scheduler burst {round_no}/{ROUNDS}: {sizes.due:,} due agents in {took:.2f}s")
    report.latency(
        f"scheduler tick, {sizes.due:,} due",
        burst_walls,
        note="enqueue through the gates and advance next_run_at, per due agent",
    )
    report.add_value("scheduler burst throughput", sizes.due * ROUNDS / sum(burst_walls), "runs/s")


def measure_dispatcher(
    report: Report, database: Database, sizes: Sizes, progress: Progress
) -> None:
    plans = report.details.setdefault("plans", {})

    def take(session: Session) -> object:
        window = week_window(database_now(session), load_settings(session).zone)
        return queue.take_dispatchable_runs(
            session, cap=10 * sizes.agents, batch=dispatch_service.BATCH, window=window
        )

    waiting = ROUNDS * sizes.due
    report.latency(
        "dispatcher: take queued runs",
        _repeat_rolled_back(database, sizes.repeats, take),
        note=f"{waiting:,} waiting, {sizes.running:,} running; a batch of {dispatch_service.BATCH}",
    )
    report.latency(
        "dispatcher: count executing + waiting",
        _repeat_rolled_back(
            database,
            sizes.repeats,
            lambda s: (queue.count_executing(s), queue.count_waiting(s)),
        ),
    )
    plans["dispatcher: take queued runs"] = plan_of(database, take, "FOR UPDATE")
    plans["dispatcher: count executing"] = plan_of(
        database, lambda s: queue.count_executing(s), "count(*)"
    )
    progress("dispatcher queries measured")


def measure_status(report: Report, database: Database, sizes: Sizes, progress: Progress) -> None:
    rng = random.Random(7)
    batches = [[rng.randint(1, sizes.agents) for _ in range(50)] for _ in range(sizes.repeats)]

    def status_rows(session: Session, dirty: list[int]) -> object:
        return agent_status_rows(session, agents_of_owners(session, dirty))

    samples = []
    for dirty in batches:
        with rolled_back(database) as session:
            samples.append(timed(status_rows, session, dirty)[0])
    report.details.setdefault("plans", {})["status writer: last run of each agent"] = plan_of(
        database, lambda session: status_rows(session, batches[0]), "DISTINCT ON"
    )
    report.latency(
        "status writer: rows of 50 changed agents",
        samples,
        note="agents_of_owners + agent_status_rows (the owners' agents share a budget)",
    )
    progress("status writer query measured")


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
            _forget_runs_of(admin, sizes.running + 1, blocks.next_id - 1)
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
