"""Run journal invariants (DESIGN.md §4) on the real database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, delete, insert, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from achilles.db.journal import runs as journal
from achilles.db.journal.models import AgentModel, AgentRun, AgentToolLink, Tool, User
from achilles.db.journal.users import upsert_user
from achilles.domain.runs import FailReason, RunState, RunTrigger, SkipReason
from achilles.errors import StartRefused
from tests.db.factories import make_agent, make_model, make_owner, set_settings

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _enqueue(engine: Engine, agent_id: int, now: datetime = NOW) -> journal.EnqueueResult:
    with Session(engine) as session, session.begin():
        return journal.enqueue_run(session, agent_id, RunTrigger.MANUAL, now=now)


def _run(engine: Engine, run_id: int) -> AgentRun:
    with Session(engine) as session:
        run = session.get(AgentRun, run_id)
        assert run is not None
        return run


def _claimed_run(engine: Engine, now: datetime = NOW) -> tuple[int, int]:
    agent_id = make_agent(engine)
    run_id = _enqueue(engine, agent_id, now).run_id
    with Session(engine) as session, session.begin():
        assert journal.claim_run(session, run_id, now=now)
    return agent_id, run_id


# --- durable locks: no row, a typed refusal ---


@pytest.mark.parametrize(
    ("overrides", "reasons"),
    [
        ({"enabled": False}, ("disabled",)),
        ({"admin_paused": True}, ("admin_paused",)),
        ({"model_name": None}, ("no_model",)),
        ({"enabled": False, "admin_paused": True}, ("disabled", "admin_paused")),
    ],
)
def test_closed_durable_lock_refuses_and_writes_no_row(
    db: Engine, overrides: dict[str, object], reasons: tuple[str, ...]
) -> None:
    agent_id = make_agent(db, owner=None, **overrides)
    with pytest.raises(StartRefused) as refused:
        _enqueue(db, agent_id)
    assert refused.value.reasons == reasons
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM agent_runs")).scalar_one() == 0


def test_inactive_owner_refuses(db: Engine) -> None:
    owner = make_owner(db)
    agent_id = make_agent(db, owner)
    with Session(db) as session, session.begin():
        result = upsert_user(session, owner, timezone=None, active=False)
    assert result.agents_disabled == 1  # deactivation writes the owner's switch
    with pytest.raises(StartRefused) as refused:
        _enqueue(db, agent_id)
    assert refused.value.reasons == ("disabled", "owner_inactive")


def test_withdrawn_model_stops_the_agent(db: Engine) -> None:
    agent_id = make_agent(db, model_name=make_model(db, "gpt-small"))
    with Session(db) as session, session.begin():
        session.execute(delete(AgentModel).where(AgentModel.name == "gpt-small"))
    with pytest.raises(StartRefused) as refused:
        _enqueue(db, agent_id)
    assert refused.value.reasons == ("no_model",)
    # Re-adding a model of the same name does not revive the agent silently.
    with Session(db) as session, session.begin():
        session.execute(
            insert(AgentModel).values(name="gpt-small", base_url="http://x/v1", provider_model="m")
        )
    with pytest.raises(StartRefused):
        _enqueue(db, agent_id)


# --- the one-active-run lock ---


def test_second_enqueue_is_skipped_already_running(db: Engine) -> None:
    agent_id = make_agent(db)
    first = _enqueue(db, agent_id)
    second = _enqueue(db, agent_id)
    assert first.state is RunState.QUEUED
    assert (second.state, second.reason) == (RunState.SKIPPED, SkipReason.ALREADY_RUNNING)
    skipped = _run(db, second.run_id)
    assert skipped.tokens_used == 0
    assert skipped.started_at is None
    assert skipped.finished_at is not None


def test_lock_is_released_by_a_terminal_state(db: Engine) -> None:
    agent_id, run_id = _claimed_run(db)
    with Session(db) as session, session.begin():
        assert journal.succeed_run(session, run_id, "done", now=NOW)
    assert _enqueue(db, agent_id).state is RunState.QUEUED


def test_raw_second_active_insert_violates_the_index(db: Engine) -> None:
    agent_id = make_agent(db)
    _enqueue(db, agent_id)
    with (
        pytest.raises(IntegrityError, match="uq_agent_runs_one_active_per_agent"),
        db.begin() as conn,
    ):
        conn.execute(
            insert(AgentRun).values(
                agent_id=agent_id, trigger="manual", state="running", started_at=NOW
            )
        )


# --- runtime budget gate ---


def _spend(engine: Engine, agent_id: int, tokens: int, finished_at: datetime) -> None:
    run_id = _enqueue(engine, agent_id, finished_at - timedelta(minutes=5)).run_id
    with Session(engine) as session, session.begin():
        assert journal.claim_run(session, run_id, now=finished_at - timedelta(minutes=5))
        assert journal.add_tokens(session, run_id, tokens)
        assert journal.succeed_run(session, run_id, "ok", now=finished_at)


def test_budget_exhausted_writes_skipped_row_with_zero_tokens(db: Engine) -> None:
    set_settings(db, agent_weekly_token_budget=1000)
    owner = make_owner(db)
    spender, other = make_agent(db, owner), make_agent(db, owner)
    _spend(db, spender, 1000, NOW - timedelta(hours=1))
    # The budget is the owner's, across all their agents.
    result = _enqueue(db, other)
    assert (result.state, result.reason) == (RunState.SKIPPED, SkipReason.BUDGET_EXCEEDED)
    assert _run(db, result.run_id).tokens_used == 0


def test_budget_window_starts_sunday_midnight_in_the_organisation_zone(db: Engine) -> None:
    """In Asia/Tokyo (UTC+9) the week starts Sunday 00:00 local = Saturday 15:00 UTC."""
    set_settings(db, agent_weekly_token_budget=500, timezone="Asia/Tokyo")
    owner = make_owner(db)
    agent_id = make_agent(db, owner)
    week_start_utc = datetime(2026, 11, 28, 15, 0, tzinfo=UTC)  # a Saturday in UTC
    assert week_start_utc.weekday() == 5
    # Spent one second before the week started: last week's, does not count.
    _spend(db, agent_id, 500, week_start_utc - timedelta(seconds=1))
    queued = _enqueue(db, agent_id, week_start_utc + timedelta(hours=1))
    assert queued.state is RunState.QUEUED
    with Session(db) as session, session.begin():
        assert journal.fail_run(
            session, queued.run_id, FailReason.ERROR, "cancelled", now=NOW, from_queued=True
        )
    # Spent exactly at the week's first instant: counts, the gate closes.
    set_settings(db, agent_weekly_token_budget=10_000)
    _spend(db, make_agent(db, owner), 500, week_start_utc)
    set_settings(db, agent_weekly_token_budget=500)
    result = _enqueue(db, agent_id, week_start_utc + timedelta(hours=2))
    assert result.reason is SkipReason.BUDGET_EXCEEDED
    # In UTC that spend belongs to the week before Sunday 2026-11-29 00:00 UTC.
    set_settings(db, timezone="UTC")
    assert (
        _enqueue(db, agent_id, datetime(2026, 11, 29, 0, 30, tzinfo=UTC)).state is RunState.QUEUED
    )


# --- guarded transitions ---


def test_claim_only_from_queued(db: Engine) -> None:
    _, run_id = _claimed_run(db)
    with Session(db) as session, session.begin():
        assert not journal.claim_run(session, run_id, now=NOW)


def test_reaped_run_cannot_be_finished_or_heartbeat(db: Engine) -> None:
    agent_id, run_id = _claimed_run(db)
    later = NOW + timedelta(seconds=91)
    with Session(db) as session, session.begin():
        reaped = journal.reap_stale_runs(session, now=later, with_job=set())  # no Job, no pod
    assert reaped == [journal.ReapedRun(run_id=run_id, agent_id=agent_id, ended=True)]
    with Session(db) as session, session.begin():
        assert not journal.record_heartbeat(session, run_id, now=later)
        assert not journal.add_tokens(session, run_id, 10)
        assert not journal.succeed_run(session, run_id, "late answer", now=later)
        assert not journal.fail_run(session, run_id, FailReason.ERROR, "late", now=later)
    run = _run(db, run_id)
    assert (run.state, run.reason, run.output) == ("failed", "stale", None)
    # The lock is released: the agent can start again.
    assert _enqueue(db, agent_id, later).state is RunState.QUEUED


def test_reaping_respects_the_threshold_and_heartbeats(db: Engine) -> None:
    _, run_id = _claimed_run(db)
    with Session(db) as session, session.begin():
        assert journal.record_heartbeat(session, run_id, now=NOW + timedelta(seconds=60))
        assert journal.reap_stale_runs(session, now=NOW + timedelta(seconds=120)) == []
        assert journal.reap_stale_runs(
            session, now=NOW + timedelta(seconds=120), stale_after=timedelta(seconds=30)
        )


def test_terminal_rows_never_change_even_by_raw_sql(db: Engine) -> None:
    _, run_id = _claimed_run(db)
    with Session(db) as session, session.begin():
        assert journal.succeed_run(session, run_id, "final", now=NOW)
    with pytest.raises(DBAPIError, match="is terminal"), db.begin() as conn:
        conn.execute(update(AgentRun).where(AgentRun.id == run_id).values(output="rewritten"))
    assert _run(db, run_id).output == "final"


def test_tokens_accumulate_while_running(db: Engine) -> None:
    _, run_id = _claimed_run(db)
    with Session(db) as session, session.begin():
        for tokens in (10, 25, 0, 7):
            assert journal.add_tokens(session, run_id, tokens)
        assert journal.fail_run(session, run_id, FailReason.ITERATION_CAP, "8 iterations", now=NOW)
    run = _run(db, run_id)
    assert (run.tokens_used, run.state, run.reason) == (42, "failed", "iteration_cap")


def test_queued_run_can_fail_when_its_pod_never_started(db: Engine) -> None:
    agent_id = make_agent(db)
    run_id = _enqueue(db, agent_id).run_id
    with Session(db) as session, session.begin():
        assert not journal.fail_run(session, run_id, FailReason.ERROR, "image pull", now=NOW)
        assert journal.fail_run(
            session, run_id, FailReason.ERROR, "image pull", now=NOW, from_queued=True
        )


# --- CHECK constraints ---


@pytest.mark.parametrize(
    "values",
    [
        {"trigger": "cron", "state": "queued"},
        {"trigger": "manual", "state": "paused"},
        {"trigger": "manual", "state": "queued", "reason": "error"},
        {"trigger": "manual", "state": "skipped", "reason": "stale", "finished_at": NOW},
        {"trigger": "manual", "state": "failed", "reason": "budget_exceeded", "finished_at": NOW},
        {"trigger": "manual", "state": "failed", "finished_at": NOW},
        {
            "trigger": "manual",
            "state": "skipped",
            "reason": "already_running",
            "tokens_used": 5,
            "finished_at": NOW,
        },
        {"trigger": "manual", "state": "queued", "tokens_used": -1},
        {"trigger": "manual", "state": "succeeded", "started_at": NOW},
        {"trigger": "manual", "state": "running"},
    ],
)
def test_check_constraints_reject(db: Engine, values: dict[str, object]) -> None:
    agent_id = make_agent(db)
    with pytest.raises(IntegrityError, match="ck_agent_runs_"), db.begin() as conn:
        conn.execute(insert(AgentRun).values(agent_id=agent_id, **values))


# --- cascades ---


def test_deleting_an_owner_cascades_to_agents_runs_and_links(db: Engine) -> None:
    owner = make_owner(db)
    agent_id = make_agent(db, owner)
    _enqueue(db, agent_id)
    with Session(db) as session, session.begin():
        tool_id = session.execute(
            insert(Tool).values(name="clock", implementation="clock").returning(Tool.id)
        ).scalar_one()
        session.execute(insert(AgentToolLink).values(agent_id=agent_id, tool_id=tool_id))
        session.execute(delete(User).where(User.key == owner))
    with db.connect() as conn:
        for table in ("agents", "agent_runs", "agent_tools"):
            assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() == 0
        assert conn.execute(text("SELECT count(*) FROM tools")).scalar_one() == 1


def test_deleting_a_tool_removes_only_the_links(db: Engine) -> None:
    agent_id = make_agent(db)
    with Session(db) as session, session.begin():
        tool_id = session.execute(
            insert(Tool).values(name="clock", implementation="clock").returning(Tool.id)
        ).scalar_one()
        session.execute(insert(AgentToolLink).values(agent_id=agent_id, tool_id=tool_id))
        with pytest.raises(IntegrityError), session.begin_nested():
            session.execute(insert(AgentToolLink).values(agent_id=agent_id, tool_id=tool_id))
        session.execute(delete(Tool).where(Tool.id == tool_id))
    with Session(db) as session:
        assert session.execute(select(AgentToolLink)).first() is None
    assert _enqueue(db, agent_id).state is RunState.QUEUED
