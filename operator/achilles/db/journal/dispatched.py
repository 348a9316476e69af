"""Runs marked dispatched, after the transaction that marked them (db/journal/dispatch.py):
a mark adopted when the run's Job already existed, undone when the API server refused
the Job, released when the Job vanished before the run started, its secret's hash
replaced when the Job's pod never got its Secret; and the active runs (with their
states) that the sweeper checks against the Jobs that exist (`services/outcomes.py`).

Each change is guarded by the row's state and the hash it was marked with, so a row
that started, ended, was released or was marked again meanwhile is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select, tuple_, update
from sqlalchemy.orm import Session

from achilles.db.journal.models import AgentRun
from achilles.domain.runs import RunState


def adopt_job_secret(session: Session, run_id: int, marked: bytes, found: bytes) -> bool:
    """The run's Job already existed (made by an earlier dispatch): the row takes the
    hash of that Job's secret instead of the one it was `marked` with, so its pod can
    claim. False when the row moved on meanwhile (no longer ours to change)."""
    changed = session.execute(
        update(AgentRun)
        .where(
            AgentRun.id == run_id,
            AgentRun.state == RunState.QUEUED,
            AgentRun.runner_secret_hash == marked,
        )
        .values(runner_secret_hash=found)
        .returning(AgentRun.id)
    )
    return changed.first() is not None


def replace_run_secret(
    session: Session, run_id: int, digest: bytes, *, dispatched_for: timedelta
) -> bytes | None:
    """A run still unclaimed, dispatched more than `dispatched_for` ago, takes the hash
    of a new secret (its Job's pod waits for a run Secret that never came: the sweeper
    makes one, `services/outcomes.py`). The row stays locked until the transaction ends.
    The hash it had, or None when the row is not such a run (claimed, ended, released,
    or dispatched too recently)."""
    old = session.execute(
        select(AgentRun.runner_secret_hash)
        .where(
            AgentRun.id == run_id,
            AgentRun.state == RunState.QUEUED,
            AgentRun.dispatched_at < func.now() - dispatched_for,
            AgentRun.runner_secret_hash.is_not(None),
        )
        .with_for_update()
    ).scalar_one_or_none()
    if old is not None:
        session.execute(
            update(AgentRun).where(AgentRun.id == run_id).values(runner_secret_hash=digest)
        )
    return old


def undo_dispatch(session: Session, marks: Mapping[int, bytes]) -> list[int]:
    """Back to waiting, FIFO place kept: runs whose Job the API server refused. Only a
    row still queued with the hash it was marked with: one that started, ended, was
    released by the sweeper or marked again since is left alone."""
    if not marks:
        return []
    undone = session.execute(
        update(AgentRun)
        .where(
            tuple_(AgentRun.id, AgentRun.runner_secret_hash).in_(list(marks.items())),
            AgentRun.state == RunState.QUEUED,
        )
        .values(dispatched_at=None, runner_secret_hash=None)
        .returning(AgentRun.id)
    )
    return list(undone.scalars())


def release_dispatch(
    session: Session, run_ids: Iterable[int], *, dispatched_before: datetime | None = None
) -> None:
    """Back in the queue (its Job is gone before it ran); it keeps its FIFO place.
    With `dispatched_before`, only a run marked before that instant (one marked again
    since, its Job perhaps being made now, is left alone)."""
    ids = list(run_ids)
    if ids:
        query = update(AgentRun).where(AgentRun.id.in_(ids), AgentRun.state == RunState.QUEUED)
        if dispatched_before is not None:
            query = query.where(AgentRun.dispatched_at < dispatched_before)
        session.execute(query.values(dispatched_at=None, runner_secret_hash=None))


@dataclass(frozen=True)
class ActiveRun:
    run_id: int
    agent_id: int
    state: RunState
    dispatched_at: datetime | None
    started_at: datetime | None


def active_runs(session: Session) -> list[ActiveRun]:
    rows = session.execute(
        select(
            AgentRun.id,
            AgentRun.agent_id,
            AgentRun.state,
            AgentRun.dispatched_at,
            AgentRun.started_at,
        ).where(AgentRun.state.in_([RunState.QUEUED, RunState.RUNNING]))
    ).all()
    return [
        ActiveRun(
            run_id=row.id,
            agent_id=row.agent_id,
            state=RunState(row.state),
            dispatched_at=row.dispatched_at,
            started_at=row.started_at,
        )
        for row in rows
    ]


def run_states(session: Session, run_ids: Iterable[int]) -> dict[int, RunState]:
    ids = list(run_ids)
    if not ids:
        return {}
    rows = session.execute(select(AgentRun.id, AgentRun.state).where(AgentRun.id.in_(ids))).all()
    return {row.id: RunState(row.state) for row in rows}


def older_than(at: datetime | None, now: datetime, age: timedelta) -> bool:
    return at is not None and at < now - age
