"""Cancelling a run: `queued|running -> failed/cancelled`, once.

The row is locked first (`FOR UPDATE`), so a cancel and whatever else may end the run at
that moment (its runner's outcome, the reaper, a pod's verdict, the dispatcher's budget
gate) are ordered by the database: the second finds the row ended and writes nothing (a
terminal row never changes again). A runner whose run was cancelled sees each of its
writes refused and stops (`achilles_run_id()` of 0011 is NULL once the row ended).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from achilles.db.journal.models import AgentRun
from achilles.db.journal.settings import database_now
from achilles.domain.runs import ACTIVE_STATES, FailReason, RunState, in_definition_order
from achilles.errors import NotFound


@dataclass(frozen=True)
class CancelledRun:
    run_id: int
    agent_id: int
    cancelled: bool  # False: it had ended already, and nothing changed
    state: RunState  # the state it ended in (failed, when this cancel ended it)
    reason: str | None
    was_running: bool  # its runner had claimed it
    dispatched: bool  # a Job was (or was being) made for it


def cancel_run(
    session: Session,
    run_id: int,
    error: str,
    *,
    agent_id: int | None = None,
    now: datetime | None = None,
) -> CancelledRun:
    """End the run `failed/cancelled` with `error` if it is queued or running; a run that
    ended already is left as it is. `agent_id`: the run must be that agent's (a request
    on an Agent names only its own runs), else `NotFound` as for a run that does not
    exist."""
    query = select(
        AgentRun.agent_id, AgentRun.state, AgentRun.reason, AgentRun.dispatched_at
    ).where(AgentRun.id == run_id)
    if agent_id is not None:
        query = query.where(AgentRun.agent_id == agent_id)
    row = session.execute(query.with_for_update()).first()
    if row is None:
        raise NotFound(f"run {run_id} does not exist")
    state = RunState(row.state)
    if state not in ACTIVE_STATES:
        return CancelledRun(
            run_id, row.agent_id, False, state, row.reason, False, row.dispatched_at is not None
        )
    session.execute(
        update(AgentRun)
        .where(
            AgentRun.id == run_id,
            AgentRun.state.in_([s.value for s in in_definition_order(ACTIVE_STATES)]),
        )
        .values(
            state=RunState.FAILED,
            reason=FailReason.CANCELLED,
            error=error,
            finished_at=now or database_now(session),
        )
    )
    return CancelledRun(
        run_id,
        row.agent_id,
        True,
        RunState.FAILED,
        FailReason.CANCELLED,
        state is RunState.RUNNING,
        row.dispatched_at is not None,
    )


def cancelled_among(session: Session, run_ids: set[int]) -> list[int]:
    """Which of `run_ids` (runs whose Job exists) ended cancelled: their Jobs must go."""
    if not run_ids:
        return []
    return list(
        session.execute(
            select(AgentRun.id).where(
                AgentRun.id.in_(sorted(run_ids)),
                AgentRun.state == RunState.FAILED,
                AgentRun.reason == FailReason.CANCELLED,
            )
        ).scalars()
    )
