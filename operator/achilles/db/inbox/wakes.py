"""Replies still owed a wake: the query that makes wake-on-reply durable (seed 003).

A reply to a blocked item of an agent whose owner allows it must be taken by a run:
by the run in progress (the runner takes unprocessed replies at its start) or by one
right after it. The wake request sent with the reply can be lost — it lands while a
run is active and becomes `skipped/already_running`, or it never reaches the cluster —
so whether a wake is still owed is derived from the rows each time, never remembered:

  an unprocessed reply nobody took (`handled_at` set; `reply_seen_at`, `outcome` NULL)
  to a blocked item, the owner's consent on, every durable lock open, no run of the
  agent active, and no run created since the reply other than an `already_running` skip.

Any other run created after the reply (succeeded, failed, skipped for the budget)
answered it: a run that could not take it (no inbox tool, a failure) is not retried
for ever. The request key of the wake is the reply's own run-request value (what
`achilles inbox reply` annotates), so the operator's wake and a late annotation make
one run between them; after `n` `already_running` skips it is that value + `+n`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, exists, func, not_, select
from sqlalchemy.orm import Session

from achilles.db.inbox.models import InboxItemRow
from achilles.db.journal.models import Agent, AgentRun, User
from achilles.domain.inbox import ItemState
from achilles.domain.inbox_wake import META_SECTION, WAKE_ON_REPLY
from achilles.domain.runs import ACTIVE_STATES, RunState, SkipReason


@dataclass(frozen=True)
class OwedWake:
    agent_id: int
    item_id: int
    handled_at: datetime  # when the reply came
    skipped_since: int  # `already_running` skips since the reply (lost wakes)
    uid: str | None
    namespace: str | None
    name: str | None


def owed_wakes(session: Session, *, limit: int = 100) -> list[OwedWake]:
    """One owed wake per agent (its latest untaken reply), oldest reply first."""
    run = AgentRun.__table__.alias("run")
    answered_since = and_(
        run.c.agent_id == InboxItemRow.agent_id,
        run.c.created_at >= InboxItemRow.handled_at,
        not_(
            and_(
                run.c.state == RunState.SKIPPED.value,
                run.c.reason == SkipReason.ALREADY_RUNNING.value,
            )
        ),
    )
    active = AgentRun.__table__.alias("active")
    skipped = AgentRun.__table__.alias("skipped")
    skipped_since = (
        select(func.count())
        .where(
            skipped.c.agent_id == InboxItemRow.agent_id,
            skipped.c.created_at >= InboxItemRow.handled_at,
        )
        .scalar_subquery()
    )
    latest = (
        select(
            InboxItemRow.agent_id,
            InboxItemRow.id.label("item_id"),
            InboxItemRow.handled_at,
            skipped_since.label("skipped_since"),
            Agent.cr_uid,
            Agent.cr_namespace,
            Agent.cr_name,
        )
        .join(Agent, Agent.id == InboxItemRow.agent_id)
        .join(User, User.id == Agent.user_id)
        .where(
            InboxItemRow.handled_at.is_not(None),
            InboxItemRow.outcome.is_(None),
            InboxItemRow.reply_seen_at.is_(None),
            InboxItemRow.state == ItemState.BLOCKED.value,
            Agent.meta[META_SECTION][WAKE_ON_REPLY].as_boolean().is_(True),
            Agent.enabled.is_(True),
            Agent.admin_paused.is_(False),
            Agent.model_id.is_not(None),
            User.active.is_(True),
            ~exists().where(
                active.c.agent_id == InboxItemRow.agent_id,
                active.c.state.in_(sorted(state.value for state in ACTIVE_STATES)),
            ),
            ~exists().where(answered_since),
        )
        .distinct(InboxItemRow.agent_id)
        .order_by(InboxItemRow.agent_id, InboxItemRow.handled_at.desc(), InboxItemRow.id.desc())
        .subquery()
    )
    rows = session.execute(select(latest).order_by(latest.c.handled_at).limit(limit)).all()
    return [
        OwedWake(
            agent_id=row.agent_id,
            item_id=row.item_id,
            handled_at=row.handled_at,
            skipped_since=int(row.skipped_since),
            uid=row.cr_uid,
            namespace=row.cr_namespace,
            name=row.cr_name,
        )
        for row in rows
    ]
