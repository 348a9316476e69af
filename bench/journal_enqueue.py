"""Enqueue of `achilles bench journal`: runs through the start gates (`enqueue_run`, as the
scheduler calls it: batches of `scheduler.BATCH` in one transaction) against a raw
single-row INSERT into the same table in the same batches (the ceiling).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal.runs import enqueue_run
from achilles.db.journal.settings import database_now, load_settings
from achilles.domain.runs import RunTrigger
from achilles.services import scheduler
from bench.journal_data import ROUNDS, AgentBlocks, Sizes
from bench.report import Progress, Report, at_least
from bench.sql import captured_sql, rolled_back, shorten, timed

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


def forget_runs_of(database: Database, first_agent: int, last_agent: int) -> None:
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
