"""Replies still owed a wake: the query that makes wake-on-reply durable (seed 003).

A reply to a blocked item of an agent whose owner allows it must be taken by a run:
by the run in progress (the runner takes unprocessed replies at its start) or by one
right after it. The wake request sent with the reply can be lost — it lands while a
run is active and becomes `skipped/already_running`, it never reaches the cluster, or
its run is cancelled before it starts — so a wake is owed until a run answers it:

  an unprocessed reply nobody took (`handled_at` set; `reply_seen_at`, `outcome` NULL)
  to a blocked item, the owner's consent on, every durable lock open, no run of the
  agent active, and no run that answered this reply (`inbox_reply_wakes`).

What answered a reply is recorded per reply by a trigger on `agent_runs`
(0017_seed_rules_two), not derived from the runs: retention deletes old runs, and a
reply whose answering run was deleted would be woken again. A run that starts answers
the replies before its start; one that ends without starting (failed, skipped for the
budget) answers those before it was queued — a run that could not take the reply is
not retried for ever. An `already_running` skip and a cancel before the start answer
nothing: they are lost wakes (`lost`). The request key of the wake is the reply's own
run-request value (what `achilles inbox reply` annotates), so the operator's wake and a
late annotation make one run between them; after `n` lost wakes it is that value + `+n`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, exists, func, select
from sqlalchemy.orm import Session

from achilles.db.inbox.models import InboxItemRow, ReplyWake
from achilles.db.journal.models import Agent, AgentRun, User
from achilles.domain.inbox import ItemState
from achilles.domain.inbox_wake import META_SECTION, WAKE_ON_REPLY
from achilles.domain.runs import ACTIVE_STATES


@dataclass(frozen=True)
class OwedWake:
    agent_id: int
    item_id: int
    handled_at: datetime  # when the reply came
    skipped_since: int  # lost wakes of this reply (`already_running` skips, cancels)
    uid: str | None
    namespace: str | None
    name: str | None


def owed_wakes(session: Session, *, limit: int = 100) -> list[OwedWake]:
    """One owed wake per agent (its latest untaken reply), oldest reply first."""
    active = AgentRun.__table__.alias("active")
    latest = (
        select(
            InboxItemRow.agent_id,
            InboxItemRow.id.label("item_id"),
            InboxItemRow.handled_at,
            func.coalesce(ReplyWake.lost, 0).label("skipped_since"),
            Agent.cr_uid,
            Agent.cr_namespace,
            Agent.cr_name,
        )
        .join(Agent, Agent.id == InboxItemRow.agent_id)
        .join(User, User.id == Agent.user_id)
        .outerjoin(
            ReplyWake,
            and_(
                ReplyWake.item_id == InboxItemRow.id,
                ReplyWake.reply_serial == InboxItemRow.reply_serial,
            ),
        )
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
            ReplyWake.answered_at.is_(None),
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
