"""Auto-suspend and the per-run token cap (issue 22, items 2 and 4) on the real database.

Auto-suspend: when a scheduled agent's slot comes due and its last N runs since its last
edit failed, the scheduler switches it off instead of enqueuing (no skipped row; the
owner's lock, no third one), its status says why and how to resume, and the owner's
switch resumes it with a clean slate. The token cap: a real `achilles runner` against a
scripted model fails `token_cap` once its tokens reach the cap, the call that crossed it
counted.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import runs as journal
from achilles.db.journal.models import Agent, AgentRun
from achilles.db.journal.run_context import claim_and_load
from achilles.domain.runs import FailReason, RunState, RunTrigger, SkipReason
from achilles.errors import StartRefused
from achilles.k8s.resources.agent import AgentSpec
from achilles.services import agent_events, agents, scheduler
from tests.db.factories import make_agent, make_model, make_owner, set_settings
from tests.db.logins import admin
from tests.db.runner_support import add_model, queue_run, run_row, run_to_end, serving

HOURLY = {"type": "interval", "every_hours": 1}
PAST = datetime(2026, 1, 1, tzinfo=UTC)


def _scheduled_agent(db: Engine, **fields: Any) -> int:
    return make_agent(db, schedule=HOURLY, next_run_at=PAST, **fields)


def _end_run(db: Engine, agent_id: int, state: RunState, reason: str | None = None) -> int:
    with Session(db) as session, session.begin():
        result = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL)
        run_id = result.run_id
        if state is RunState.SKIPPED:
            return run_id  # a second active run is refused as skipped: not here
        if reason == FailReason.CANCELLED:
            assert journal.fail_unclaimed_run(session, run_id, FailReason.CANCELLED, "by a test")
            return run_id
        assert journal.claim_run(session, run_id)
        if state is RunState.SUCCEEDED:
            assert journal.succeed_run(session, run_id, "fine")
        else:
            assert journal.fail_run(session, run_id, FailReason(reason or "error"), "broke")
    return run_id


def _skip(db: Engine, agent_id: int) -> None:
    with Session(db) as session, session.begin():
        session.add(
            AgentRun(
                agent_id=agent_id,
                trigger=RunTrigger.SCHEDULED,
                state=RunState.SKIPPED,
                reason=SkipReason.BUDGET_EXCEEDED,
                finished_at=func.now(),
            )
        )


def _make_due(db: Engine, agent_id: int) -> None:
    with Session(db) as session, session.begin():
        session.execute(update(Agent).where(Agent.id == agent_id).values(next_run_at=PAST))


def _tick(database_url: str) -> scheduler.TickResult:
    return scheduler.schedule_due_agents(admin(database_url), repair=False)


def _agent(db: Engine, agent_id: int) -> Agent:
    with Session(db) as session:
        return session.execute(select(Agent).where(Agent.id == agent_id)).scalar_one()


def _runs(db: Engine, agent_id: int) -> int:
    with Session(db) as session:
        return session.execute(
            select(func.count()).select_from(AgentRun).where(AgentRun.agent_id == agent_id)
        ).scalar_one()


def test_the_last_n_runs_failed_switches_the_agent_off_instead_of_a_run(
    db: Engine, database_url: str
) -> None:
    """Seed 000 has two locks and no third (issue 36 item 7): auto-suspend closes the
    owner's switch, as a deactivated owner does, and owes the Agent resource
    `spec.enabled: false` with an Event that says why and how to resume."""
    set_settings(db, agent_suspend_after_failures=2)
    agent = _scheduled_agent(db)
    with Session(db) as session, session.begin():  # linked to its Agent resource
        session.execute(
            update(Agent).where(Agent.id == agent).values(cr_namespace="team", cr_name="digest")
        )
    failed = [_end_run(db, agent, RunState.FAILED), _end_run(db, agent, RunState.FAILED)]
    tick = _tick(database_url)
    assert [s.agent_id for s in tick.suspended] == [agent]
    assert tick.suspended[0].run_ids == tuple(sorted(failed, reverse=True))
    assert "the last 2 runs failed" in tick.suspended[0].message
    assert "set spec.enabled: true to resume" in tick.suspended[0].message
    assert tick.enqueued == []
    row = _agent(db, agent)
    assert (row.enabled, row.next_run_at) == (False, None)
    assert row.suspended_at is not None
    assert _runs(db, agent) == 2  # no skipped row: the slot is simply not taken
    (owed,) = agents.owed_specs(admin(database_url))
    assert owed.patch == {"enabled": False}
    (write,) = owed.writes.values()
    assert (write.reason, write.event_type) == ("AgentSuspended", "Warning")
    assert write.message == tick.suspended[0].message
    # Not scheduled any more, however often the scheduler looks (the repair included).
    scheduler.schedule_due_agents(admin(database_url), repair=True)
    assert _agent(db, agent).next_run_at is None
    # The owner's switch is off: a manual run is refused like any closed lock, no row.
    with Session(db) as session, session.begin(), pytest.raises(StartRefused):
        journal.enqueue_run(session, agent, RunTrigger.MANUAL)
    assert _runs(db, agent) == 2


def test_skipped_and_cancelled_runs_do_not_count_and_a_success_breaks_the_streak(
    db: Engine, database_url: str
) -> None:
    set_settings(db, agent_suspend_after_failures=2)
    agent = _scheduled_agent(db)
    _end_run(db, agent, RunState.FAILED)
    _end_run(db, agent, RunState.SUCCEEDED)
    _end_run(db, agent, RunState.FAILED)
    _skip(db, agent)
    _end_run(db, agent, RunState.FAILED, FailReason.CANCELLED)
    tick = _tick(database_url)  # counted, newest first: failed, succeeded, failed
    assert tick.suspended == []
    assert [agent_id for agent_id, _ in tick.enqueued] == [agent]
    with Session(db) as session, session.begin():
        run_id = tick.enqueued[0][1].run_id
        assert journal.claim_run(session, run_id)
        assert journal.fail_run(session, run_id, FailReason.TOKEN_CAP, "capped")
    _make_due(db, agent)
    assert [s.agent_id for s in _tick(database_url).suspended] == [agent]


def test_the_agents_own_threshold_wins_and_zero_means_never(db: Engine, database_url: str) -> None:
    set_settings(db, agent_suspend_after_failures=5)
    never = _scheduled_agent(db)
    soon = _scheduled_agent(db)
    with Session(db) as session, session.begin():
        session.execute(update(Agent).where(Agent.id == never).values(suspend_after_failures=0))
        session.execute(update(Agent).where(Agent.id == soon).values(suspend_after_failures=1))
    for agent in (never, soon):
        _end_run(db, agent, RunState.FAILED)
    tick = _tick(database_url)
    assert [s.agent_id for s in tick.suspended] == [soon]
    assert [agent_id for agent_id, _ in tick.enqueued] == [never]


def test_without_a_threshold_nothing_is_suspended(db: Engine, database_url: str) -> None:
    agent = _scheduled_agent(db)
    for _ in range(3):
        _end_run(db, agent, RunState.FAILED)
    tick = _tick(database_url)
    assert tick.suspended == []
    assert [agent_id for agent_id, _ in tick.enqueued] == [agent]


def _cr(
    owner: str,
    model: str,
    prompt: str,
    generation: int,
    uid: str,
    *,
    enabled: bool = True,
    admin_paused: bool = False,
) -> agent_events.AgentObject:
    spec = AgentSpec.model_validate(
        {
            "owner": owner,
            "prompt": prompt,
            "model": model,
            "schedule": {"type": "interval", "everyHours": 1},
            "suspendAfterFailures": 2,
            "enabled": enabled,
            "adminPaused": admin_paused,
        }
    )
    return agent_events.AgentObject(
        uid=uid, namespace="default", name="digest", generation=generation, spec=spec, status={}
    )


def _suspend_through_the_cr(
    database: Database, db: Engine, database_url: str, owner: str, model: str, uid: str
) -> int:
    first = agent_events.reconcile_agent(database, _cr(owner, model, "v1", 1, uid), is_new=True)
    agent = first.agent_id
    assert agent is not None
    _make_due(db, agent)
    for _ in range(2):
        _end_run(db, agent, RunState.FAILED)
    assert [s.agent_id for s in _tick(database_url).suspended] == [agent]
    return agent


def test_only_the_owners_switch_resumes_a_suspended_agent(db: Engine, database_url: str) -> None:
    """What the status says resumes it is what does (issue 36 item 7): neither a resync,
    nor another edit, nor an admin's toggle of adminPaused; only spec.enabled: true, after
    which the old failures no longer count."""
    database = Database(database_url, pool_size=1)
    owner, model, uid = make_owner(db), make_model(db), str(uuid.uuid4())
    try:
        agent = _suspend_through_the_cr(database, db, database_url, owner, model, uid)

        # The CR still says enabled: true until the owed write lands: the owed value wins.
        same = agent_events.reconcile_agent(database, _cr(owner, model, "v1", 1, uid))
        assert same.status["phase"] == "Suspended"
        assert same.status["nextRunAt"] is None
        assert same.status["suspendedAt"] is not None
        (ready,) = [c for c in same.status["conditions"] if c["type"] == "Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "Disabled")
        assert "set spec.enabled: true" in ready["message"]
        (scheduled,) = [c for c in same.status["conditions"] if c["type"] == "Scheduled"]
        assert (scheduled["status"], scheduled["reason"]) == ("False", "SuspendedAfterFailures")
        assert "set spec.enabled: true to resume" in scheduled["message"]

        # The operator's write lands (spec.enabled: false); a fixed prompt, an admin's
        # pause and its release: still off.
        off = agent_events.reconcile_agent(database, _cr(owner, model, "v1", 2, uid, enabled=False))
        assert off.status["phase"] == "Suspended"
        assert agents.owed_specs(database) == []
        fixed = agent_events.reconcile_agent(
            database, _cr(owner, model, "v2", 3, uid, enabled=False)
        )
        paused = agent_events.reconcile_agent(
            database, _cr(owner, model, "v2", 4, uid, enabled=False, admin_paused=True)
        )
        (ready,) = [c for c in paused.status["conditions"] if c["type"] == "Ready"]
        assert "an admin paused the agent" in ready["message"]
        released = agent_events.reconcile_agent(
            database, _cr(owner, model, "v2", 5, uid, enabled=False)
        )
        for status in (fixed.status, released.status):
            assert (status["phase"], status["nextRunAt"]) == ("Suspended", None)
        assert _agent(db, agent).enabled is False

        # The owner switches it on: a slot again, and the two old failures do not count.
        on = agent_events.reconcile_agent(database, _cr(owner, model, "v2", 6, uid))
        assert on.status["phase"] == "Ready"
        assert on.status["suspendedAt"] is None
        assert on.status["nextRunAt"] is not None
        assert _agent(db, agent).suspended_at is None
        _make_due(db, agent)
        tick = _tick(database_url)
        assert tick.suspended == []
        assert [agent_id for agent_id, _ in tick.enqueued] == [agent]
    finally:
        database.dispose()


def test_the_run_spec_carries_the_agents_cap_else_the_platforms(db: Engine) -> None:
    set_settings(db, agent_max_run_tokens=500)
    own, platform = make_agent(db), make_agent(db)
    with Session(db) as session, session.begin():
        session.execute(update(Agent).where(Agent.id == own).values(max_run_tokens=50))
    caps = {}
    for agent in (own, platform):
        with Session(db) as session, session.begin():
            run_id = journal.enqueue_run(session, agent, RunTrigger.MANUAL).run_id
            spec = claim_and_load(session, run_id)
            assert spec is not None
            caps[agent] = spec.max_run_tokens
    assert caps == {own: 50, platform: 500}
    set_settings(db, agent_max_run_tokens=None)
    with Session(db) as session, session.begin():
        run_id = journal.enqueue_run(session, make_agent(db), RunTrigger.MANUAL).run_id
        spec = claim_and_load(session, run_id)
        assert spec is not None
        assert spec.max_run_tokens is None


TOOL_CALLING = {
    "rules": [
        {
            "reply": {
                "tool_calls": [{"name": "search_knowledge", "arguments": {"query": "deploy"}}],
                "usage": {"prompt_tokens": 6, "completion_tokens": 4},
            }
        }
    ]
}


def test_the_runner_stops_at_the_token_cap_counting_the_call_that_crossed_it(
    db: Engine, database_url: str
) -> None:
    set_settings(db, agent_max_run_tokens=25, agent_max_iterations=10)
    with serving(TOOL_CALLING) as server:
        run_id = queue_run(db, owner=make_owner(db), model=add_model(db, server))
        code, log = run_to_end(database_url, run_id)
        calls = len(server.recorded())
    assert code == 0, log
    row = run_row(db, run_id)
    # 10 tokens a call: 10, 20, then 30 >= 25; the third call counted, no fourth made.
    assert (row.state, row.reason, row.tokens_used) == ("failed", "token_cap", 30)
    assert row.error == "the run used 30 tokens, reaching its cap of 25 (maxRunTokens)"
    assert calls == 3


def test_a_final_answer_that_reaches_the_cap_is_still_the_answer(
    db: Engine, database_url: str
) -> None:
    set_settings(db, agent_max_run_tokens=5)
    script = {
        "rules": [
            {"reply": {"content": "Done.", "usage": {"prompt_tokens": 6, "completion_tokens": 3}}}
        ]
    }
    with serving(script) as server:
        run_id = queue_run(db, owner=make_owner(db), model=add_model(db, server))
        code, log = run_to_end(database_url, run_id)
    assert code == 0, log
    row = run_row(db, run_id)
    assert (row.state, row.tokens_used, row.output) == ("succeeded", 9, "Done.")


def test_the_controls_are_checked_by_the_database_too(db: Engine) -> None:
    agent = make_agent(db)
    for values in ({"max_run_tokens": 0}, {"suspend_after_failures": -1}):
        with (
            pytest.raises(IntegrityError, match="ck_agents_"),
            Session(db) as session,
            session.begin(),
        ):
            session.execute(update(Agent).where(Agent.id == agent).values(**values))
    row = _agent(db, agent)
    assert (row.max_run_tokens, row.suspend_after_failures) == (None, None)
