"""Journal retention (issue 22) on the real database, as the operator's login: finished
runs older than `runRetentionDays` go in small batches with their steps, never a run the
current budget week sums, never a row another transaction holds (it waits for a later
pass), and nothing at all while the setting keeps every run.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal.retention import retention_cutoff
from achilles.db.journal.settings import database_now, load_settings
from achilles.db.roles import Component
from achilles.domain.budget import week_window
from achilles.services.journal_reads import weekly_budget
from achilles.services.retention import apply_retention
from tests.db.factories import make_agent, make_owner, set_settings
from tests.db.logins import login_url
from tests.db.test_budget_deleted_agents import _spend


@pytest.fixture
def operator_db(db: Engine, database_url: str) -> Iterator[Database]:
    database = Database(login_url(database_url, Component.OPERATOR), pool_size=2)
    yield database
    database.dispose()


def _finished_at(engine: Engine, run_id: int, at: datetime) -> None:
    """Move a run back in time (as the superuser, past the trigger that keeps a finished
    run as it ended: no component may)."""
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL session_replication_role = replica"))
        conn.execute(
            text("UPDATE agent_runs SET started_at = :at, finished_at = :at WHERE id = :id"),
            {"at": at, "id": run_id},
        )


def _add_step(engine: Engine, run_id: int, at: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO agent_run_steps (run_id, seq, kind, started_at, ended_at,"
                " latency_ms, model) VALUES (:id, 1, 'model_call', :at, :at, 1.0, 'm')"
            ),
            {"id": run_id, "at": at},
        )


def _ids(engine: Engine, table: str, column: str = "id") -> set[int]:
    with engine.connect() as conn:
        return set(conn.execute(text(f"SELECT {column} FROM {table}")).scalars())


def _clock(engine: Engine) -> tuple[datetime, datetime]:
    with Session(engine) as session:
        now = database_now(session)
        return now, week_window(now, load_settings(session).zone).start


def test_the_default_keeps_every_run(db: Engine, operator_db: Database) -> None:
    agent_id = make_agent(db)
    run_id = _spend(db, agent_id, 10)
    now, _ = _clock(db)
    _finished_at(db, run_id, now - timedelta(days=3650))
    done = apply_retention(operator_db)
    assert (done.cutoff, done.runs_deleted) == (None, 0)
    assert _ids(db, "agent_runs") == {run_id}


def test_old_runs_go_in_batches_with_their_steps_and_the_week_stays(
    db: Engine, operator_db: Database
) -> None:
    owner = make_owner(db, "rita")
    agent_id = make_agent(db, owner)
    now, week_start = _clock(db)
    ancient = []
    for n in range(7):
        run_id = _spend(db, agent_id, 10)
        _finished_at(db, run_id, now - timedelta(days=400 + n))
        _add_step(db, run_id, now - timedelta(days=400 + n))
        ancient.append(run_id)
    # Just before and just after the budget week began; and now.
    before_week = _spend(db, agent_id, 20)
    _finished_at(db, before_week, week_start - timedelta(minutes=1))
    in_week = _spend(db, agent_id, 30)
    _finished_at(db, in_week, week_start + timedelta(seconds=1))
    latest = _spend(db, agent_id, 40)
    budget_before = weekly_budget(operator_db, owner).used

    set_settings(db, agent_run_retention_days=1)
    cutoff = retention_cutoff(now, 1, week_start)
    assert cutoff <= week_start  # never inside the budget week, whatever the weekday
    done = apply_retention(operator_db, batch=3, max_batches=2)
    assert done.runs_deleted == 6  # two batches of three, then the pass stops
    assert done.more_left
    done = apply_retention(operator_db, batch=3, max_batches=2)
    # The pass reads its own clock: the same cutoff, or a later one early in the week
    # (while a day ago is still before the week began), never one inside the week.
    assert done.cutoff is not None
    assert cutoff <= done.cutoff <= week_start
    # The run just before the week goes only once it is a day old, too.
    expected_gone = set(ancient) | (
        {before_week} if week_start - timedelta(minutes=1) < done.cutoff else set()
    )
    left = _ids(db, "agent_runs")
    assert left == {before_week, in_week, latest, *ancient} - expected_gone
    assert {in_week, latest} <= left
    assert not done.more_left
    # The steps went with their runs (the foreign key cascades for the operator too).
    assert _ids(db, "agent_run_steps", "run_id") == set()
    # What this week's budget sums is untouched.
    assert weekly_budget(operator_db, owner).used == budget_before
    assert apply_retention(operator_db).runs_deleted == 0


def test_a_row_another_transaction_holds_is_left_for_a_later_pass(
    db: Engine, operator_db: Database
) -> None:
    agent_id = make_agent(db)
    now, _ = _clock(db)
    held, free = _spend(db, agent_id, 1), _spend(db, agent_id, 1)
    for run_id in (held, free):
        _finished_at(db, run_id, now - timedelta(days=30))
    set_settings(db, agent_run_retention_days=7)
    with db.connect() as other, other.begin():
        other.execute(text("SELECT id FROM agent_runs WHERE id = :id FOR UPDATE"), {"id": held})
        done = apply_retention(operator_db)  # does not wait for the lock
        assert done.runs_deleted == 1
    assert _ids(db, "agent_runs") == {held}
    assert apply_retention(operator_db).runs_deleted == 1
    assert _ids(db, "agent_runs") == set()
