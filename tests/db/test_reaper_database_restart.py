"""The reaper counts a runner's silence only while the database is up (services/outcomes.sweep):
no runner can beat while PostgreSQL is down, so an outage of the database itself must never
make a run stale. `achilles chaos postgres-outage` shows it end to end; this is the rule."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.journal.settings import database_now, database_started_at
from achilles.domain.runs import RunTrigger
from achilles.k8s.jobs import RunJobs
from achilles.services.outcomes import sweep
from tests.db.factories import make_agent


class _NoJobs:
    """No Job exists; deleting one finds nothing."""

    def delete(self, run_id: int) -> bool:
        return False


def test_no_run_is_reaped_until_the_database_has_been_up_for_the_threshold(
    db: Engine, database_url: str
) -> None:
    agent_id = make_agent(db)
    with Session(db) as session, session.begin():
        now = database_now(session)
        up_for = now - database_started_at(session)
        run_id = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL).run_id
        # Silent for longer than the server has been up: it last beat before the start.
        assert journal.claim_run(session, run_id, now=now - up_for - timedelta(hours=2))
    database = Database(database_url, pool_size=1)
    jobs = cast(RunJobs, _NoJobs())
    try:
        longer_than_up = up_for + timedelta(hours=1)
        assert sweep(database, jobs, set(), stale_after=longer_than_up).reaped == []
        with db.begin() as conn:
            state = conn.execute(text("SELECT state FROM agent_runs WHERE id = :r"), {"r": run_id})
            assert state.scalar_one() == "running"
        # Once the server has been up for the threshold, the same silence is stale.
        assert sweep(database, jobs, set(), stale_after=up_for / 2).reaped == [run_id]
    finally:
        database.dispose()
