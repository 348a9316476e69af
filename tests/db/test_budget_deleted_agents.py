"""Seed 000: runs go with their agent, yet the weekly budget keeps what they spent.

Deleting and re-creating an agent used to give its tokens back (the budget summed only
the runs of agents that still exist); `deleted_agent_tokens` (0009) keeps them counted.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, delete, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from achilles.db.journal import runs as journal
from achilles.db.journal.models import Agent, DeletedAgentTokens, User
from achilles.domain.runs import RunState, RunTrigger, SkipReason
from tests.db.factories import make_agent, make_owner, set_settings
from tests.db.test_cli_journal import achilles


def _spend(engine: Engine, agent_id: int, tokens: int) -> int:
    """One run of the agent that spent `tokens`, finished now (the database's clock)."""
    with Session(engine) as session, session.begin():
        run_id = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL).run_id
        assert journal.claim_run(session, run_id)
        assert journal.add_tokens(session, run_id, tokens)
        assert journal.succeed_run(session, run_id, "done")
    return run_id


def _delete_agent(engine: Engine, agent_id: int) -> None:
    with Session(engine) as session, session.begin():
        session.execute(delete(Agent).where(Agent.id == agent_id))


def _budget(database_url: str, owner: str) -> dict[str, object]:
    shown = achilles(database_url, "budget", "show", "--owner", owner, "--json")
    assert shown.returncode == 0, shown.stderr
    result: dict[str, object] = json.loads(shown.stdout)
    return result


def test_deleting_an_agent_does_not_give_its_tokens_back(db: Engine, database_url: str) -> None:
    set_settings(db, agent_weekly_token_budget=1000)
    owner = make_owner(db, "dora")
    kept = make_agent(db, owner, name="kept")
    doomed = make_agent(db, owner, name="digest")
    _spend(db, kept, 300)
    _spend(db, doomed, 400)
    _spend(db, doomed, 300)
    before = _budget(database_url, owner)
    assert (before["used"], before["exhausted"]) == (1000, True)

    _delete_agent(db, doomed)
    with db.connect() as conn:  # the runs went with the agent (seed 000)
        assert (
            conn.execute(
                text("SELECT count(*) FROM agent_runs WHERE agent_id = :a"), {"a": doomed}
            ).scalar_one()
            == 0
        )
    recreated = make_agent(db, owner, name="digest")

    after = _budget(database_url, owner)
    assert (after["used"], after["limit"], after["exhausted"]) == (1000, 1000, True)
    refused = achilles(database_url, "runs", "enqueue", str(recreated), "--json")
    assert refused.returncode == 0, refused.stderr
    shown = json.loads(refused.stdout)
    assert (shown["state"], shown["reason"]) == ("skipped", "budget_exceeded")


def test_the_budget_is_refused_below_the_limit_only_by_what_was_spent(db: Engine) -> None:
    """Under the limit a re-created agent still runs; the deleted runs are counted once."""
    set_settings(db, agent_weekly_token_budget=1000)
    owner = make_owner(db)
    doomed = make_agent(db, owner)
    _spend(db, doomed, 600)
    _delete_agent(db, doomed)
    recreated = make_agent(db, owner)
    with Session(db) as session, session.begin():
        first = journal.enqueue_run(session, recreated, RunTrigger.MANUAL)
    assert first.state is RunState.QUEUED
    with Session(db) as session, session.begin():
        assert journal.claim_run(session, first.run_id)
        assert journal.add_tokens(session, first.run_id, 400)
        assert journal.succeed_run(session, first.run_id, "done")
    with Session(db) as session, session.begin():
        second = journal.enqueue_run(session, recreated, RunTrigger.MANUAL)
    assert (second.state, second.reason) == (RunState.SKIPPED, SkipReason.BUDGET_EXCEEDED)


def test_the_kept_tokens_are_append_only_and_go_with_the_owner(db: Engine) -> None:
    owner = make_owner(db)
    doomed = make_agent(db, owner)
    _spend(db, doomed, 50)
    _delete_agent(db, doomed)
    with Session(db) as session, session.begin():
        kept = session.execute(select(DeletedAgentTokens.tokens_used)).scalars().all()
        assert kept == [50]
        with pytest.raises(DBAPIError, match="append-only"), session.begin_nested():
            session.execute(text("UPDATE deleted_agent_tokens SET tokens_used = 1"))
    # Deleting the owner takes everything (and a cascading agent delete records nothing).
    survivor = make_agent(db, owner)
    _spend(db, survivor, 70)
    with Session(db) as session, session.begin():
        session.execute(delete(User).where(User.key == owner))
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM deleted_agent_tokens")).scalar_one() == 0


def test_a_running_runs_tokens_stay_counted_when_its_agent_is_deleted(
    db: Engine, database_url: str
) -> None:
    """Issue 36 item 4: the owner may delete an Agent mid-run; what its runner reported
    was spent, and seed 000 counts every token spent in the week."""
    set_settings(db, agent_weekly_token_budget=1000)
    owner = make_owner(db)
    doomed = make_agent(db, owner)
    with Session(db) as session, session.begin():
        running = journal.enqueue_run(session, doomed, RunTrigger.MANUAL).run_id
        assert journal.claim_run(session, running)
        assert journal.add_tokens(session, running, 700)
    with Session(db) as session, session.begin():
        queued = journal.enqueue_run(session, make_agent(db, owner), RunTrigger.MANUAL).run_id
    before = _budget(database_url, owner)
    assert before["used"] == 0  # a running run counts once it ends (seed 000)

    _delete_agent(db, doomed)

    after = _budget(database_url, owner)
    assert (after["used"], after["exhausted"]) == (700, False)
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM agent_runs")).scalar_one() == 1
    with Session(db) as session, session.begin():
        assert journal.claim_run(session, queued)
        assert journal.add_tokens(session, queued, 300)
        assert journal.succeed_run(session, queued, "done")
    assert _budget(database_url, owner)["exhausted"] is True
