"""Agent Inbox queries, reply side: the two reply channels, take, acknowledge (seed 003).

Each channel is one conditional UPDATE, so there is no window between reading
the current reply and replacing it:
- inbox: `WHERE id = :id` — it always replaces, clears `reply_seen_at`;
- chat:  `WHERE id = :id AND (reply IS NULL OR reply_seen_at IS NOT NULL)` —
  it never lands on a reply the agent has not taken; a refusal is a result,
  not an error.
A person who read the item may also name the revision they replied to
(`expected_revision`, the API's `If-Match`): one more guard in the same UPDATE, so a
reply to a question that changed meanwhile (re-asked, moved) is refused, never written.
Replies since that revision do not count as a change: the inbox channel always
replaces the current reply (seed 003), a chat reply included.
An accepted reply bumps the item's revision and then its board (lock order of
`achilles.db.inbox.board`). Taking and acknowledging touch the item only.
The caller owns the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, exists, func, or_, select, update
from sqlalchemy.orm import Session

from achilles.db.inbox.board import (
    GUARDED_WRITE_ATTEMPTS,
    ITEM_COLUMNS,
    bump_board,
    get_item,
    get_item_and_board_version,
    has_unprocessed_reply,
    item_from_row,
)
from achilles.db.inbox.models import InboxItemRevision, InboxItemRow
from achilles.domain.inbox import (
    AckStatus,
    InboxItem,
    ReplyChannel,
    ReplyKind,
    ReplyRefusal,
    acknowledge_status,
    validate_text,
)

# `agent_inbox_item_revisions.change` of a revision that an accepted reply made (0010).
REPLIED = "replied"


@dataclass(frozen=True)
class ReplyWrite:
    item: InboxItem  # after the write; as found when refused
    board_version: int
    refusal: ReplyRefusal | None = None  # None: written

    @property
    def accepted(self) -> bool:
        return self.refusal is None


def write_reply(
    session: Session,
    item_id: int,
    text: str,
    kind: ReplyKind,
    channel: ReplyChannel,
    *,
    expected_revision: int | None = None,
    by: str | None = None,
) -> ReplyWrite:
    """Write a human's reply by `channel`'s rule; with `expected_revision`, only over that
    revision. `by` names who replied (kept with the reply and in the item's history)."""
    validate_text("reply", text)
    guards = [InboxItemRow.id == item_id]
    if channel is ReplyChannel.CHAT:
        guards.append(or_(InboxItemRow.reply.is_(None), InboxItemRow.reply_seen_at.is_not(None)))
    if expected_revision is not None:
        guards.append(asked_as_of(expected_revision))
    row = session.execute(
        update(InboxItemRow)
        .where(*guards)
        .values(
            reply=text,
            reply_kind=kind.value,
            reply_channel=channel.value,
            reply_serial=InboxItemRow.reply_serial + 1,
            handled_at=func.now(),
            reply_seen_at=None,
            outcome=None,
            revision=InboxItemRow.revision + 1,
            reply_by=by,
        )
        .returning(*ITEM_COLUMNS)
    ).first()
    if row is None:
        # Refused (or absent: NotFound). Read afterwards, for the caller's
        # information only: the decision was the UPDATE's. What the item says only
        # changes forward, so the expected revision still asking the same question
        # means the chat rule refused.
        current, version = get_item_and_board_version(session, item_id)
        stale = expected_revision is not None and not _still_asked_as_of(
            session, item_id, expected_revision
        )
        refusal = ReplyRefusal.STALE_REVISION if stale else ReplyRefusal.CHAT_RULE
        return ReplyWrite(item=current, board_version=version, refusal=refusal)
    item = item_from_row(row)
    return ReplyWrite(item=item, board_version=bump_board(session, item.agent_id))


def asked_as_of(expected_revision: int) -> ColumnElement[bool]:
    """The item still says what it said at `expected_revision`: every revision since was
    a reply (`agent_inbox_item_revisions`, one row per revision: 0010), none a re-ask or
    a move. A revision the item never had is not."""
    changed = InboxItemRevision.__table__.alias("changed")
    return and_(
        InboxItemRow.revision >= expected_revision,
        ~exists().where(
            changed.c.item_id == InboxItemRow.id,
            changed.c.revision > expected_revision,
            changed.c.change != REPLIED,
        ),
    )


def _still_asked_as_of(session: Session, item_id: int, expected_revision: int) -> bool:
    found = session.execute(
        select(InboxItemRow.id).where(InboxItemRow.id == item_id, asked_as_of(expected_revision))
    ).first()
    return found is not None


def take_reply(session: Session, item_id: int) -> InboxItem | None:
    """Mark the item's unprocessed reply as taken (idempotent); None if there is none."""
    row = session.execute(
        update(InboxItemRow)
        .where(InboxItemRow.id == item_id, has_unprocessed_reply())
        .values(reply_seen_at=func.coalesce(InboxItemRow.reply_seen_at, func.now()))
        .returning(*ITEM_COLUMNS)
    ).first()
    if row is None:
        get_item(session, item_id)  # NotFound for a missing item
        return None
    return item_from_row(row)


def take_unprocessed_replies(session: Session, agent_id: int) -> list[InboxItem]:
    """Take every unprocessed reply of the agent, oldest first.

    Replies taken earlier and never acknowledged (the agent crashed) are
    returned again with their first `reply_seen_at`.
    """
    locked = (
        select(InboxItemRow.id)
        .where(InboxItemRow.agent_id == agent_id, has_unprocessed_reply())
        .order_by(InboxItemRow.id)
        .with_for_update()
        .scalar_subquery()
    )
    rows = session.execute(
        update(InboxItemRow)
        .where(InboxItemRow.id.in_(locked), has_unprocessed_reply())
        .values(reply_seen_at=func.coalesce(InboxItemRow.reply_seen_at, func.now()))
        .returning(*ITEM_COLUMNS)
    ).all()
    return sorted((item_from_row(row) for row in rows), key=_oldest_reply_first)


def _oldest_reply_first(item: InboxItem) -> tuple[datetime, int]:
    assert item.reply is not None, "only answered items are taken"
    return item.reply.handled_at, item.id


def list_unprocessed_replies(session: Session, agent_id: int) -> list[InboxItem]:
    """Items whose human reply the agent has not acknowledged (taken or not), oldest first."""
    rows = session.execute(
        select(*ITEM_COLUMNS)
        .where(InboxItemRow.agent_id == agent_id, has_unprocessed_reply())
        .order_by(InboxItemRow.handled_at, InboxItemRow.id)
    ).all()
    return [item_from_row(row) for row in rows]


@dataclass(frozen=True)
class AckResult:
    status: AckStatus
    item: InboxItem


def acknowledge(session: Session, item_id: int, reply_serial: int, outcome: str) -> AckResult:
    """Record the outcome of processing reply `reply_serial`, which the agent took.

    Only that exact reply, taken and not yet acknowledged, is marked: a newer
    reply (`superseded`) stays unprocessed for the agent to take.
    """
    validate_text("outcome", outcome)
    for _ in range(GUARDED_WRITE_ATTEMPTS):
        row = session.execute(
            update(InboxItemRow)
            .where(
                InboxItemRow.id == item_id,
                InboxItemRow.reply_serial == reply_serial,
                InboxItemRow.reply_seen_at.is_not(None),
                InboxItemRow.outcome.is_(None),
            )
            .values(outcome=outcome)
            .returning(*ITEM_COLUMNS)
        ).first()
        if row is not None:
            return AckResult(status=AckStatus.ACKNOWLEDGED, item=item_from_row(row))
        current = get_item(session, item_id)
        status = acknowledge_status(current, reply_serial)
        if status is not AckStatus.ACKNOWLEDGED:
            return AckResult(status=status, item=current)
        # A take landed between the UPDATE and the read: try again.
    return AckResult(status=AckStatus.NOT_TAKEN, item=current)
