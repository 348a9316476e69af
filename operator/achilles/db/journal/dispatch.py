"""Queries of the dispatcher and the Job watcher: FIFO runs under the cap, decided here.

The cap (`agent_max_concurrency`) counts executing runs: `running`, or `queued` and
marked dispatched (`dispatched_at`: its Job is made, being made, or lost, until the
sweeper finds it missing). Taking runs holds a transaction-scoped advisory lock, and
the runs taken are marked in the same transaction, so two operator replicas choose one
after the other and can never exceed the cap together; the Jobs are made after that
transaction commits. The Job name is derived from the run id, so a retry finds its Job
(AlreadyExists) instead of making a second one.

Each run taken comes with its agent's durable locks and its owner's weekly tokens, read
now: a run waits behind the cap, and what held when it was queued may no longer hold
when its turn comes (`services/dispatch.py` decides). What becomes of a mark after that
transaction (adopted, undone, released, its secret replaced) and the active runs the
sweeper checks against the Jobs are `db/journal/dispatched.py`'s.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    bindparam,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentModel, AgentRun, RunStartRefusal, User
from achilles.db.journal.usage import tokens_used_by
from achilles.db.tools.sources import header_secrets_of_agents
from achilles.domain.budget import BudgetWindow
from achilles.domain.gates import DurableLocks, closed_locks
from achilles.domain.mcp_tools import HeaderSecret
from achilles.domain.runs import ACTIVE_STATES, RunState

# One key for "dispatching now" across replicas (migrations use 0x4AC41).
DISPATCH_LOCK_KEY = 0x4AC42


@dataclass(frozen=True)
class DispatchableRun:
    run_id: int
    agent_id: int
    trigger: str
    created_at: datetime
    scheduled_for: datetime | None
    agent_uid: str | None
    agent_namespace: str | None
    agent_name: str | None
    request_key: str | None  # the manual request it answers, if any
    locks: DurableLocks  # the agent's, now
    owner_tokens: int  # the owner's tokens this week, now
    model_secret_name: str | None
    model_secret_key: str | None
    # The agent's MCP credentials, by Secret reference (its allowed sources' headers).
    mcp_headers: tuple[HeaderSecret, ...] = ()

    @property
    def startable(self) -> bool:
        return not closed_locks(self.locks)


def executing_filter() -> ColumnElement[bool]:
    return or_(
        AgentRun.state == RunState.RUNNING,
        and_(AgentRun.state == RunState.QUEUED, AgentRun.dispatched_at.is_not(None)),
    )


def count_executing(session: Session) -> int:
    return int(
        session.execute(
            select(func.count()).select_from(AgentRun).where(executing_filter())
        ).scalar_one()
    )


def count_waiting(session: Session) -> int:
    return int(
        session.execute(
            select(func.count())
            .select_from(AgentRun)
            .where(AgentRun.state == RunState.QUEUED, AgentRun.dispatched_at.is_(None))
        ).scalar_one()
    )


def take_dispatchable_runs(
    session: Session,
    cap: int,
    batch: int,
    window: BudgetWindow,
    *,
    held_agents: Collection[int] = (),
) -> list[DispatchableRun]:
    """Lock the dispatcher, then the oldest waiting runs that fit under `cap`, each with
    its agent's locks and its owner's tokens in the budget `window`; none of
    `held_agents` (an earlier run's pod is still there: `agents_with_lingering_pods`)."""
    session.execute(select(func.pg_advisory_xact_lock(DISPATCH_LOCK_KEY)))
    room = cap - count_executing(session)
    if room <= 0:
        return []
    where = AgentRun.agent_id.not_in(sorted(held_agents)) if held_agents else None
    return _waiting_runs(session, window, limit=min(room, batch), where=where)


def agents_with_lingering_pods(
    session: Session, pod_run_ids: Collection[int] | None, *, ended_after: datetime
) -> set[int]:
    """The agents of the runs in `pod_run_ids` (their pod is still there) that ended
    after `ended_after`. Seed 002: one active run is one runner alive per agent, and a
    run's row ends before its pod does (the runner writes its end, then exits; the
    kubelet then reports it), so the agent's next run waits for that pod; a pod that
    outlives its run's end by more than the grace is a zombie, which locks nothing.
    `pod_run_ids` None (the pod watcher has not listed the pods yet, as after a restart):
    any run that ended after `ended_after` may still have its pod, so its agent waits."""
    if pod_run_ids is not None and not pod_run_ids:
        return set()
    terminal = [state.value for state in RunState if state not in ACTIVE_STATES]
    query = select(AgentRun.agent_id).where(
        AgentRun.state.in_(terminal), AgentRun.finished_at > ended_after
    )
    if pod_run_ids is not None:
        query = query.where(AgentRun.id.in_(sorted(pod_run_ids)))
    return set(session.execute(query.distinct()).scalars())


def take_locked_waiting_runs(
    session: Session, batch: int, window: BudgetWindow
) -> list[DispatchableRun]:
    """Lock the dispatcher, then waiting runs (no Job yet) whose agent a durable lock
    closed, wherever they are in the queue: they will never start, and their requester
    should hear so now rather than when their turn comes."""
    session.execute(select(func.pg_advisory_xact_lock(DISPATCH_LOCK_KEY)))
    startable = (
        Agent.enabled
        & ~Agent.admin_paused
        & Agent.model_id.is_not(None)
        & func.coalesce(User.active, False)
    )
    return _waiting_runs(session, window, limit=batch, where=~startable)


def _waiting_runs(
    session: Session,
    window: BudgetWindow,
    *,
    limit: int,
    where: ColumnElement[bool] | None = None,
) -> list[DispatchableRun]:
    query = (
        select(
            AgentRun.id,
            AgentRun.agent_id,
            AgentRun.trigger,
            AgentRun.created_at,
            AgentRun.scheduled_for,
            Agent.cr_uid,
            Agent.cr_namespace,
            Agent.cr_name,
            AgentRun.request_key,
            Agent.enabled,
            Agent.admin_paused,
            Agent.model_id,
            User.active,
            tokens_used_by(Agent.user_id, window.start, window.end).label("used"),
            AgentModel.api_key_secret_name,
            AgentModel.api_key_secret_key,
        )
        .join(Agent, Agent.id == AgentRun.agent_id)
        .outerjoin(User, User.id == Agent.user_id)
        .outerjoin(AgentModel, AgentModel.id == Agent.model_id)
        .where(AgentRun.state == RunState.QUEUED, AgentRun.dispatched_at.is_(None))
    )
    if where is not None:
        query = query.where(where)
    rows = session.execute(
        query.order_by(AgentRun.created_at, AgentRun.id)
        .limit(limit)
        .with_for_update(of=AgentRun, skip_locked=True)
    ).all()
    credentials = header_secrets_of_agents(session, [row.agent_id for row in rows])
    return [
        DispatchableRun(
            run_id=row.id,
            agent_id=row.agent_id,
            trigger=row.trigger,
            created_at=row.created_at,
            scheduled_for=row.scheduled_for,
            agent_uid=row.cr_uid,
            agent_namespace=row.cr_namespace,
            agent_name=row.cr_name,
            request_key=row.request_key,
            locks=DurableLocks(
                enabled=row.enabled,
                admin_paused=row.admin_paused,
                has_model=row.model_id is not None,
                owner_present=row.active is not None,
                owner_active=bool(row.active),
            ),
            owner_tokens=int(row.used),
            model_secret_name=row.api_key_secret_name,
            model_secret_key=row.api_key_secret_key,
            mcp_headers=credentials.get(row.agent_id, ()),
        )
        for row in rows
    ]


def withdraw_queued_runs(session: Session, run_ids: Sequence[int]) -> list[int]:
    """Remove runs that never started (queued, no Job made): a durable lock closed while
    they waited, and a closed lock leaves no row (seed 000). They spent nothing."""
    if not run_ids:
        return []
    removed = session.execute(
        delete(AgentRun)
        .where(
            AgentRun.id.in_(run_ids),
            AgentRun.state == RunState.QUEUED,
            AgentRun.dispatched_at.is_(None),
        )
        .returning(AgentRun.id)
    )
    return list(removed.scalars())


def take_start_refusals(session: Session, batch: int) -> list[DispatchableRun]:
    """The runs their claim removed because a durable lock had closed since their Job
    was made (`achilles_claim_run`, 0017), each with the locks the claim found, as a
    withdrawn waiting run is reported; their records go in this transaction (a replica
    that holds one is passed over, `SKIP LOCKED`)."""
    taken = (
        select(RunStartRefusal.run_id)
        .order_by(RunStartRefusal.created_at, RunStartRefusal.run_id)
        .limit(batch)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    refusals = session.execute(
        delete(RunStartRefusal)
        .where(RunStartRefusal.run_id.in_(taken))
        .returning(
            RunStartRefusal.run_id,
            RunStartRefusal.agent_id,
            RunStartRefusal.trigger,
            RunStartRefusal.request_key,
            RunStartRefusal.enabled,
            RunStartRefusal.admin_paused,
            RunStartRefusal.has_model,
            RunStartRefusal.owner_present,
            RunStartRefusal.owner_active,
            RunStartRefusal.created_at,
        )
    ).all()
    agents = {
        row.id: row
        for row in session.execute(
            select(Agent.id, Agent.cr_uid, Agent.cr_namespace, Agent.cr_name).where(
                Agent.id.in_({refusal.agent_id for refusal in refusals})
            )
        )
    }
    runs = []
    for refusal in sorted(refusals, key=lambda r: (r.created_at, r.run_id)):
        agent = agents.get(refusal.agent_id)
        runs.append(
            DispatchableRun(
                run_id=refusal.run_id,
                agent_id=refusal.agent_id,
                trigger=refusal.trigger,
                created_at=refusal.created_at,
                scheduled_for=None,
                agent_uid=agent.cr_uid if agent else None,
                agent_namespace=agent.cr_namespace if agent else None,
                agent_name=agent.cr_name if agent else None,
                request_key=refusal.request_key,
                locks=DurableLocks(
                    enabled=refusal.enabled,
                    admin_paused=refusal.admin_paused,
                    has_model=refusal.has_model,
                    owner_present=refusal.owner_present,
                    owner_active=refusal.owner_active,
                ),
                owner_tokens=0,
                model_secret_name=None,
                model_secret_key=None,
            )
        )
    return runs


def mark_dispatched(session: Session, secrets: Mapping[int, bytes], now: datetime) -> None:
    """The runs whose Jobs are to be made, each with the SHA-256 of its Job's run secret
    (the rows are locked by this transaction since `take_dispatchable_runs`)."""
    if secrets:
        session.execute(
            update(cast(Table, AgentRun.__table__))
            .where(AgentRun.id == bindparam("run"), AgentRun.state == RunState.QUEUED)
            .values(dispatched_at=now, runner_secret_hash=bindparam("digest")),
            [{"run": run_id, "digest": digest} for run_id, digest in secrets.items()],
        )
