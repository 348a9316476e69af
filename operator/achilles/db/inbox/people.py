"""Agent Inbox queries for people through the API: an owner's inbox, one item's history.

An owner's inbox is one index range whatever the number of their agents: items carry
their owner (`user_id`, kept by 0010_api's triggers), and the queue is ordered by
`(state <> 'blocked', id)` — blocked first, then oldest first — which is
`ix_agent_inbox_items_owner_queue` (a state filter uses
`ix_agent_inbox_items_user_id_state_id`). Pages are keyset pages: the cursor is the last
row's (blocked?, id), so a page is as cheap at the millionth item as at the first.
The caller owns the transaction.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Connection,
    Integer,
    Select,
    bindparam,
    literal_column,
    select,
    tuple_,
)
from sqlalchemy.orm import Session

from achilles.db.inbox.board import ITEM_COLUMNS, ItemListing, item_from_row
from achilles.db.inbox.models import InboxItemRevision, InboxItemRow
from achilles.db.journal.models import Agent, User
from achilles.domain.inbox import ItemState, ReplyChannel, ReplyKind


@dataclass(frozen=True)
class QueuePosition:
    """Where a page ended: the last item's section (blocked or not) and id."""

    blocked: bool
    item_id: int


def owner_queue(
    session: Session | Connection,
    owner_key: str,
    *,
    states: Sequence[ItemState] = (),
    agent_id: int | None = None,
    after: QueuePosition | None = None,
    limit: int,
) -> list[ItemListing]:
    """The owner's items, blocked first, then by id; the page after `after`.

    Without a state filter (or with several states) this is one range of
    `ix_agent_inbox_items_owner_queue`; with one state, of `..._user_id_state_id`."""
    states = tuple(dict.fromkeys(states))
    params: dict[str, Any] = {"owner_key": owner_key, "limit": limit}
    if states:
        params["states"] = [s.value for s in states]
    if agent_id is not None:
        params["agent_id"] = agent_id
    cursor = _Cursor.NONE
    if len(states) == 1:
        # One state is one section: `ix_agent_inbox_items_user_id_state_id` in id order.
        blocked = states[0] is ItemState.BLOCKED
        if after is not None:
            if after.blocked != blocked and not after.blocked:
                return []  # the cursor is past this section
            if after.blocked == blocked:
                cursor = _Cursor.ID
                params["after_id"] = after.item_id
    elif after is not None:
        cursor = _Cursor.QUEUE
        params["after_not_blocked"] = not after.blocked
        params["after_id"] = after.item_id
    statement = _queue_statement(
        filtered=bool(states),
        one_state=len(states) == 1,
        by_agent=agent_id is not None,
        cursor=cursor,
    )
    rows = session.execute(statement, params).all()
    return [
        ItemListing(item=item_from_row(row), agent_name=row.agent_name, owner_key=owner_key)
        for row in rows
    ]


class _Cursor(enum.Enum):
    NONE = "none"
    ID = "id"  # within one section: id > :after_id
    QUEUE = "queue"  # across sections: (blocked?, id) > (:after_not_blocked, :after_id)


@functools.cache
def _queue_statement(
    *, filtered: bool, one_state: bool, by_agent: bool, cursor: _Cursor
) -> Select[Any]:
    """The queue's statement for one shape of the question, built once: its values are
    bound parameters (building and hashing a SELECT cost more CPU than running it)."""
    owner_id = select(User.id).where(User.key == bindparam("owner_key")).scalar_subquery()
    # A constant, not a bound parameter: the index's expression is `state <> 'blocked'`,
    # and a prepared statement's generic plan cannot match `state <> $2` to it, so it
    # sorted every item of the owner (23 ms for 1 k items; `achilles bench api`).
    not_blocked = InboxItemRow.state != literal_column(f"'{ItemState.BLOCKED.value}'")
    query = (
        select(*ITEM_COLUMNS, Agent.name.label("agent_name"))
        .join(Agent, Agent.id == InboxItemRow.agent_id)
        .where(InboxItemRow.user_id == owner_id)
    )
    if filtered:
        query = query.where(InboxItemRow.state.in_(bindparam("states", expanding=True)))
    if by_agent:
        query = query.where(InboxItemRow.agent_id == bindparam("agent_id", type_=BigInteger))
    after_id = bindparam("after_id", type_=BigInteger)
    if cursor is _Cursor.ID:
        query = query.where(InboxItemRow.id > after_id)
    elif cursor is _Cursor.QUEUE:
        after_not_blocked = bindparam("after_not_blocked", type_=Boolean)
        query = query.where(
            tuple_(not_blocked, InboxItemRow.id) > tuple_(after_not_blocked, after_id)
        )
    order: tuple[Any, ...] = (InboxItemRow.id,) if one_state else (not_blocked, InboxItemRow.id)
    return query.order_by(*order).limit(bindparam("limit", type_=Integer))


def owner_agent_id(session: Session | Connection, owner_key: str, ref: str) -> int | None:
    """The owner's agent named by `ref`: `namespace/name` of its Agent resource, or its
    numeric id. None when the owner has no such agent."""
    query = select(Agent.id).join(User, User.id == Agent.user_id).where(User.key == owner_key)
    namespace, slash, name = ref.partition("/")
    if slash:
        query = query.where(Agent.cr_namespace == namespace, Agent.cr_name == name)
    elif ref.isdigit() and len(ref) <= 18:
        query = query.where(Agent.id == int(ref))
    else:
        return None
    return session.execute(query.limit(1)).scalar_one_or_none()


def item_owner(session: Session, item_id: int) -> str | None:
    """The key of the item's owner; None when there is no such item."""
    return session.execute(
        select(User.key)
        .join(InboxItemRow, InboxItemRow.user_id == User.id)
        .where(InboxItemRow.id == item_id)
    ).scalar_one_or_none()


@dataclass(frozen=True)
class Revision:
    """One revision of an item: what it said (`asked`, `updated`) or who replied how."""

    revision: int
    change: str  # asked | replied | updated
    state: ItemState
    at: datetime
    question: str | None = None
    context: str | None = None
    reply: str | None = None
    reply_kind: ReplyKind | None = None
    reply_channel: ReplyChannel | None = None
    reply_serial: int = 0
    reply_by: str | None = None


def item_history(session: Session, item_id: int) -> list[Revision]:
    """Every revision of the item, oldest first."""
    rows = session.execute(
        select(InboxItemRevision)
        .where(InboxItemRevision.item_id == item_id)
        .order_by(InboxItemRevision.revision)
    ).scalars()
    return [
        Revision(
            revision=row.revision,
            change=row.change,
            state=ItemState(row.state),
            at=row.at,
            question=row.question,
            context=row.context,
            reply=row.reply,
            reply_kind=ReplyKind(row.reply_kind) if row.reply_kind else None,
            reply_channel=ReplyChannel(row.reply_channel) if row.reply_channel else None,
            reply_serial=row.reply_serial,
            reply_by=row.reply_by,
        )
        for row in rows
    ]
