"""Stopping a run: a cancel (`queued|running -> failed/cancelled`) or the reaper's stop
(`running -> failed/stale`, `runs.reap_stale_runs`), once, and only once its pod is gone
(issue 36 item 3; seed 002: one active run, one runner alive per agent).

The row is locked first (`FOR UPDATE`), so a cancel and whatever else may end the run at
that moment (its runner's outcome, the reaper, a pod's verdict, the dispatcher's budget
gate) are ordered by the database: the second finds the row ended and writes nothing (a
terminal row never changes again). A queued run with no Job made ends at once. A run
that has or may have a pod (running, or queued and dispatched) is only asked to stop
(`stop_requested_at`, 0019, 0021): it stays active, holding its agent and its slot,
while the operator deletes its Job with the pods; whatever end is written then (the
runner's SIGTERM, the pod seen gone, the stop deadline) is `failed/<stop_reason>` with the
stop's error (a trigger, `achilles_end_as_asked`), and the tokens reported until then
stay. A stop whose pod is never seen gone (a lost node) ends at its deadline
(`end_stopped_runs(asked_before=...)`): a zombie does not lock its agent for ever (seed 002).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from achilles.db.journal.models import AgentRun
from achilles.db.journal.settings import database_now
from achilles.domain.run_cancel import CancelledRun
from achilles.domain.runs import ACTIVE_STATES, FailReason, RunState, in_definition_order
from achilles.errors import NotFound


def cancel_run(
    session: Session,
    run_id: int,
    error: str,
    *,
    agent_id: int | None = None,
    now: datetime | None = None,
) -> CancelledRun:
    """Cancel the run with `error` if it is queued or running: at once when no Job was
    made for it, else by asking it to stop (it ends when its pod is gone). A run that
    ended already, or is stopping already, is left as it is. `agent_id`: the run must be
    that agent's (a request on an Agent names only its own runs), else `NotFound` as for
    a run that does not exist."""
    query = select(
        AgentRun.agent_id,
        AgentRun.state,
        AgentRun.reason,
        AgentRun.dispatched_at,
        AgentRun.stop_requested_at,
    ).where(AgentRun.id == run_id)
    if agent_id is not None:
        query = query.where(AgentRun.agent_id == agent_id)
    row = session.execute(query.with_for_update()).first()
    if row is None:
        raise NotFound(f"run {run_id} does not exist")
    state = RunState(row.state)
    dispatched = row.dispatched_at is not None
    running = state is RunState.RUNNING
    if state not in ACTIVE_STATES:
        return CancelledRun(run_id, row.agent_id, False, state, row.reason, False, dispatched)
    at = now or database_now(session)
    if row.stop_requested_at is not None:
        return CancelledRun(
            run_id, row.agent_id, False, state, None, running, dispatched, stopping=True
        )
    if running or dispatched:
        session.execute(
            update(AgentRun)
            .where(AgentRun.id == run_id)
            .values(stop_requested_at=at, stop_reason=FailReason.CANCELLED, stop_error=error)
        )
        return CancelledRun(
            run_id, row.agent_id, True, state, None, running, dispatched, stopping=True
        )
    session.execute(
        update(AgentRun)
        .where(AgentRun.id == run_id, AgentRun.state == RunState.QUEUED)
        .values(
            state=RunState.FAILED,
            reason=FailReason.CANCELLED,
            error=error,
            finished_at=at,
        )
    )
    return CancelledRun(
        run_id, row.agent_id, True, RunState.FAILED, FailReason.CANCELLED, False, False
    )


def stopping_among(session: Session, run_ids: set[int]) -> list[int]:
    """Which of `run_ids` (runs whose Job exists) are being stopped, or ended cancelled or
    stale: their Jobs must go, with their pods."""
    if not run_ids:
        return []
    return list(
        session.execute(
            select(AgentRun.id).where(
                AgentRun.id.in_(sorted(run_ids)),
                or_(
                    and_(
                        AgentRun.stop_requested_at.is_not(None),
                        AgentRun.state.in_([s.value for s in in_definition_order(ACTIVE_STATES)]),
                    ),
                    and_(
                        AgentRun.state == RunState.FAILED,
                        AgentRun.reason.in_([FailReason.CANCELLED, FailReason.STALE]),
                    ),
                ),
            )
        ).scalars()
    )


def end_stopped_runs(
    session: Session,
    *,
    run_ids: set[int] | None = None,
    without_job: set[int] | None = None,
    dispatched_before: datetime | None = None,
    asked_before: datetime | None = None,
) -> list[int]:
    """End `failed/<stop_reason>` the runs asked to stop whose pod is gone: those in `run_ids`
    (their Job was deleted, with its pods: foreground propagation), or, with
    `without_job` (the runs whose Job exists), those not in it that are running or were
    dispatched before `dispatched_before` (a Job being made is not missing yet); or, with
    `asked_before`, those asked before it whose pod was never seen gone (a node that no
    longer answers keeps it `Terminating`): a zombie does not lock its agent for ever
    (seed 002), and its runner, if it ever runs again, finds its row ended. The caller
    chooses that deadline past the pods' termination grace."""
    active = [s.value for s in in_definition_order(ACTIVE_STATES)]
    query = update(AgentRun).where(
        AgentRun.stop_requested_at.is_not(None), AgentRun.state.in_(active)
    )
    if run_ids is not None:
        if not run_ids:
            return []
        query = query.where(AgentRun.id.in_(sorted(run_ids)))
    if without_job is not None:
        not_made_now = AgentRun.state == RunState.RUNNING
        if dispatched_before is not None:
            not_made_now = or_(not_made_now, AgentRun.dispatched_at < dispatched_before)
        query = query.where(AgentRun.id.not_in(sorted(without_job)), not_made_now)
    if asked_before is not None:
        query = query.where(AgentRun.stop_requested_at < asked_before)
    # The trigger (0021) makes any end of such a run the stop's, with its error.
    ended = session.execute(
        query.values(
            state=RunState.FAILED, reason=AgentRun.stop_reason, finished_at=func.now()
        ).returning(AgentRun.id)
    )
    return list(ended.scalars())
