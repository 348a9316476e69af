"""The operator's loops' queries in `achilles bench journal`: the scheduler (the due-agent
scan with none and with a burst due, the idle tick, the repair pass, a tick that enqueues
a burst), the dispatcher's (`take_dispatchable_runs`, `count_executing`, `count_waiting`)
and the status writer's (`agent_status_rows`).
"""

from __future__ import annotations

import random

from sqlalchemy import text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import dispatch as queue
from achilles.db.journal import schedule as schedule_rows
from achilles.db.journal.settings import database_now, load_settings
from achilles.db.journal.status import agent_status_rows, agents_of_owners
from achilles.domain.budget import week_window
from achilles.services import dispatch as dispatch_service
from achilles.services import scheduler
from bench.journal_data import ROUNDS, AgentBlocks, Sizes
from bench.report import Progress, Report
from bench.sql import captured_sql, plan_of, repeat_rolled_back, rolled_back, shorten, timed


def _due_scan(session: Session) -> object:
    return schedule_rows.take_due_agents(session, database_now(session), scheduler.BATCH)


def measure_scheduler(
    report: Report, database: Database, sizes: Sizes, blocks: AgentBlocks, progress: Progress
) -> None:
    plans = report.details.setdefault("plans", {})
    report.latency(
        "due-agent scan, none due",
        repeat_rolled_back(database, sizes.repeats, _due_scan),
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
                repeat_rolled_back(database, sizes.repeats, _due_scan),
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
        repeat_rolled_back(database, sizes.repeats, take),
        note=f"{waiting:,} waiting, {sizes.running:,} running; a batch of {dispatch_service.BATCH}",
    )
    report.latency(
        "dispatcher: count executing + waiting",
        repeat_rolled_back(
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
