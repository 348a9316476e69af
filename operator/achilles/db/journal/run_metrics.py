"""The journal's figures behind the operator's run metrics (`services/run_metrics.py`).

Each query reads an index, never the whole journal: the active runs through the partial
indexes on `queued`/`running` rows (one active run per agent at most), the runs that
ended in a window through `finished_at`, the runs claimed in a window through the
running rows' `heartbeat_at` (a claim writes its heartbeat) and, for runs that already
ended, `finished_at` again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from achilles.db.journal.models import AgentRun
from achilles.domain.runs import ACTIVE_STATES, RunState


@dataclass(frozen=True)
class ActiveRuns:
    waiting: int  # queued, no Job yet (not dispatched)
    starting: int  # queued and dispatched: a Job made, not claimed yet
    running: int
    oldest_waiting_since: datetime | None  # created_at of the oldest waiting run


@dataclass(frozen=True)
class EndedRuns:
    trigger: str
    state: str
    reason: str  # "" when the state has none (succeeded)
    count: int


def active_runs(session: Session) -> ActiveRuns:
    rows = session.execute(
        select(
            AgentRun.state,
            AgentRun.dispatched_at.is_not(None),
            func.count(),
            func.min(AgentRun.created_at),
        )
        .where(AgentRun.state.in_([state.value for state in ACTIVE_STATES]))
        .group_by(AgentRun.state, AgentRun.dispatched_at.is_not(None))
    ).all()
    waiting = starting = running = 0
    oldest: datetime | None = None
    for state, dispatched, count, first in rows:
        if state == RunState.RUNNING:
            running += count
        elif dispatched:
            starting += count
        else:
            waiting, oldest = count, first
    return ActiveRuns(waiting, starting, running, oldest)


def ended_runs(session: Session, since: datetime, until: datetime) -> list[EndedRuns]:
    """Runs whose `finished_at` is in [since, until), grouped."""
    rows = session.execute(
        select(AgentRun.trigger, AgentRun.state, AgentRun.reason, func.count())
        .where(AgentRun.finished_at >= since, AgentRun.finished_at < until)
        .group_by(AgentRun.trigger, AgentRun.state, AgentRun.reason)
    ).all()
    return [
        EndedRuns(trigger, state, reason or "", count) for trigger, state, reason, count in rows
    ]


def claim_delays(session: Session, since: datetime, until: datetime) -> list[float]:
    """Seconds from dispatch (the mark made just before the Job's create) to the claim
    (the runner's first heartbeat), of the runs claimed in [since, until)."""
    claimed = and_(
        AgentRun.started_at >= since,
        AgentRun.started_at < until,
        AgentRun.dispatched_at.is_not(None),
    )
    # A run claimed in the window has beaten since (still running) or ended since.
    seen = or_(
        and_(AgentRun.state == RunState.RUNNING, AgentRun.heartbeat_at >= since),
        AgentRun.finished_at >= since,
    )
    delays = session.execute(
        select(func.extract("epoch", AgentRun.started_at - AgentRun.dispatched_at)).where(
            claimed, seen
        )
    ).scalars()
    return [max(0.0, float(delay)) for delay in delays]
