"""Agent Inbox queries, agent side: the board, asking, and `board_advance` (seed 003).

The rules are `achilles.domain.inbox`'s; here they become guarded statements
that decide atomically in the database, and pure functions only *explain* a
refusal after the fact. Every write that bumps an item's `revision` bumps its
board's `board_version` in the same transaction.

Lock order, to stay deadlock-free under any number of writers: an item row
first, then its board row. Nothing here locks a board and then an item, and
each function writes at most one item; callers should keep to one board write
per transaction (taking replies in bulk locks items only, in id order).
The caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, and_, exists, literal_column, not_, or_, select, update
from sqlalchemy import true as sa_true
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from achilles.db.inbox.models import InboxBoard, InboxItemRow
from achilles.db.journal.models import Agent, User
from achilles.db.journal.users import find_owner_id
from achilles.domain.inbox import (
    MAX_QUESTION_LENGTH,
    Board,
    InboxItem,
    ItemState,
    Reply,
    ReplyChannel,
    ReplyKind,
    check_advance,
    check_reask,
    states_that_may_become,
    validate_key,
    validate_text,
)
from achilles.errors import InboxConflict, NotFound

ITEM_COLUMNS = tuple(InboxItemRow.__table__.columns)
# A guarded write that lost to a concurrent *permissive* change (a take or an
# acknowledgement landing in between) is simply tried again, a bounded number of times.
GUARDED_WRITE_ATTEMPTS = 5


def has_unprocessed_reply() -> ColumnElement[bool]:
    """An unprocessed reply: the same predicate as the partial index
    (`achilles.db.checks.UNPROCESSED_REPLY_PREDICATE`), for queries that join."""
    return and_(InboxItemRow.handled_at.is_not(None), InboxItemRow.outcome.is_(None))


def item_from_row(row: Row[Any]) -> InboxItem:
    values = row._mapping
    reply = None
    if values["reply"] is not None:
        reply = Reply(
            text=values["reply"],
            kind=ReplyKind(values["reply_kind"]),
            channel=ReplyChannel(values["reply_channel"]),
            serial=values["reply_serial"],
            handled_at=values["handled_at"],
            seen_at=values["reply_seen_at"],
            outcome=values["outcome"],
            by=values["reply_by"],
        )
    return InboxItem(
        id=values["id"],
        agent_id=values["agent_id"],
        key=values["key"],
        state=ItemState(values["state"]),
        question=values["question"],
        context=values["context"],
        revision=values["revision"],
        reply=reply,
        created_at=values["created_at"],
        updated_at=values["updated_at"],
    )


def bump_board(session: Session, agent_id: int) -> int:
    """The board half of every revision bump; call after the item write (lock order)."""
    return session.execute(
        update(InboxBoard)
        .where(InboxBoard.agent_id == agent_id)
        .values(board_version=InboxBoard.board_version + 1)
        .returning(InboxBoard.board_version)
    ).scalar_one()


def get_item(session: Session, item_id: int) -> InboxItem:
    row = session.execute(select(*ITEM_COLUMNS).where(InboxItemRow.id == item_id)).first()
    if row is None:
        raise NotFound(f"inbox item {item_id} does not exist")
    return item_from_row(row)


def get_item_and_board_version(session: Session, item_id: int) -> tuple[InboxItem, int]:
    """Both halves of the CAS from one snapshot."""
    row = session.execute(
        select(*ITEM_COLUMNS, InboxBoard.board_version)
        .join(InboxBoard, InboxBoard.agent_id == InboxItemRow.agent_id)
        .where(InboxItemRow.id == item_id)
    ).first()
    if row is None:
        raise NotFound(f"inbox item {item_id} does not exist")
    return item_from_row(row), row.board_version


def read_board(session: Session, agent_id: int) -> Board:
    """The board version and its items from one snapshot, so a later CAS is sound."""
    rows = session.execute(
        select(InboxBoard.board_version, *ITEM_COLUMNS)
        .select_from(InboxBoard)
        .outerjoin(InboxItemRow, InboxItemRow.agent_id == InboxBoard.agent_id)
        .where(InboxBoard.agent_id == agent_id)
        .order_by(InboxItemRow.id)
    ).all()
    if not rows:
        _require_agent(session, agent_id)
        return Board(agent_id=agent_id, version=0, items=())
    items = tuple(item_from_row(row) for row in rows if row.id is not None)
    return Board(agent_id=agent_id, version=rows[0].board_version, items=items)


def _require_agent(session: Session, agent_id: int) -> None:
    if session.execute(select(Agent.id).where(Agent.id == agent_id)).first() is None:
        raise NotFound(f"agent {agent_id} does not exist")


# --- asking (create or re-ask by key) ---


@dataclass(frozen=True)
class AskResult:
    item: InboxItem
    board_version: int
    created: bool
    changed: bool  # False: the same question asked again, nothing written


def ask(
    session: Session,
    agent_id: int,
    key: str,
    question: str,
    context: str | None = None,
    state: ItemState | None = None,
    *,
    expected_revision: int | None = None,
    board_version: int | None = None,
) -> AskResult:
    """Create the item for `key`, or update it in place (one question, one row).

    A new item is `state` (blocked when None). On an existing item a changed question or
    context bumps `revision` (and the board), and the same question asked again writes
    nothing. A change of state is a versioned operation (seed 003): it needs
    `expected_revision` and `board_version` as the caller read them, and is then
    `board_advance`'s compare-and-swap, question included (the context is replaced
    when given, kept when None); without them it is refused (`InboxVersionRequired`).
    `state=None` keeps an existing item's state.
    """
    validate_key(key)
    validate_text("question", question, limit=MAX_QUESTION_LENGTH)
    if context is not None:
        validate_text("context", context)
    _require_agent(session, agent_id)
    session.execute(insert(InboxBoard).values(agent_id=agent_id).on_conflict_do_nothing())

    table = InboxItemRow.__table__
    proposed = insert(InboxItemRow).values(
        agent_id=agent_id,
        key=key,
        state=(state or ItemState.BLOCKED).value,
        question=question,
        context=context,
    )
    new = proposed.excluded
    # An existing row is updated here only where its state stays as it is.
    keeps_state = table.c.state == new.state if state is not None else sa_true()
    upsert = proposed.on_conflict_do_update(
        index_elements=[table.c.agent_id, table.c.key],
        set_={"question": new.question, "context": new.context, "revision": table.c.revision + 1},
        where=and_(
            keeps_state,
            or_(
                table.c.question.is_distinct_from(new.question),
                table.c.context.is_distinct_from(new.context),
            ),
        ),
    ).returning(*ITEM_COLUMNS, literal_column("xmax = 0").label("inserted"))
    row = session.execute(upsert).first()
    if row is not None:
        return AskResult(
            item=item_from_row(row),
            board_version=bump_board(session, agent_id),
            created=bool(row.inserted),
            changed=True,
        )
    # ON CONFLICT locked the row although its WHERE said no, so this read is
    # exactly what was judged: either a repeat, or a change of state.
    current_row = session.execute(
        select(*ITEM_COLUMNS, InboxBoard.board_version)
        .join(InboxBoard, InboxBoard.agent_id == InboxItemRow.agent_id)
        .where(InboxItemRow.agent_id == agent_id, InboxItemRow.key == key)
    ).one()
    current = item_from_row(current_row)
    wanted = current.state if state is None else state
    check_reask(
        current,
        current_row.board_version,
        wanted,
        expected_revision=expected_revision,
        expected_board_version=board_version,
    )
    if wanted is not current.state:
        # check_reask refused a change of state without them.
        assert expected_revision is not None
        assert board_version is not None
        moved = board_advance(
            session,
            current.id,
            expected_revision=expected_revision,
            board_version=board_version,
            target=wanted,
            context=context,
            question=question,
        )
        return AskResult(
            item=moved.item, board_version=moved.board_version, created=False, changed=True
        )
    # Nothing to change: the same question asked again.
    assert (current.question, current.context) == (question, context), "re-ask unexplained"
    return AskResult(
        item=current, board_version=current_row.board_version, created=False, changed=False
    )


# --- board_advance: compare-and-swap on the item revision and the board version ---


@dataclass(frozen=True)
class AdvanceResult:
    item: InboxItem
    board_version: int


def board_advance(
    session: Session,
    item_id: int,
    *,
    expected_revision: int,
    board_version: int,
    target: ItemState,
    context: str | None = None,
    question: str | None = None,
) -> AdvanceResult:
    """Move an item to `target` iff neither it nor its board moved since the caller read them.

    Raises `InboxConflict` (with the current revision and board version) when
    either moved, `InvalidInboxTransition` for a move the rules forbid, and
    `InboxReplyPending` for leaving `blocked` before the reply was acknowledged.
    `context` and `question` (a re-ask that moves the state), when given, replace the
    item's in the same write.
    """
    if context is not None:
        validate_text("context", context)
    if question is not None:
        validate_text("question", question, limit=MAX_QUESTION_LENGTH)
    sources = [s.value for s in states_that_may_become(target)]
    board_unchanged = exists().where(
        InboxBoard.agent_id == InboxItemRow.agent_id, InboxBoard.board_version == board_version
    )
    for _ in range(GUARDED_WRITE_ATTEMPTS):
        savepoint = session.begin_nested()
        row = session.execute(
            update(InboxItemRow)
            .where(
                InboxItemRow.id == item_id,
                InboxItemRow.revision == expected_revision,
                InboxItemRow.state.in_(sources),
                or_(InboxItemRow.state != ItemState.BLOCKED.value, not_(has_unprocessed_reply())),
                board_unchanged,
            )
            .values(
                state=target.value,
                context=InboxItemRow.context if context is None else context,
                question=InboxItemRow.question if question is None else question,
                revision=InboxItemRow.revision + 1,
            )
            .returning(*ITEM_COLUMNS)
        ).first()
        if row is not None:
            # The item is ours now; the board may still have moved since the
            # statement's snapshot, so the board bump is a CAS of its own.
            new_version = session.execute(
                update(InboxBoard)
                .where(
                    InboxBoard.agent_id == row.agent_id,
                    InboxBoard.board_version == board_version,
                )
                .values(board_version=InboxBoard.board_version + 1)
                .returning(InboxBoard.board_version)
            ).scalar_one_or_none()
            if new_version is not None:
                savepoint.commit()
                return AdvanceResult(item=item_from_row(row), board_version=new_version)
        savepoint.rollback()
        current, current_version = get_item_and_board_version(session, item_id)
        check_advance(
            current,
            current_version,
            expected_revision=expected_revision,
            expected_board_version=board_version,
            target=target,
        )
    raise InboxConflict(
        item_id,
        expected_revision=expected_revision,
        current_revision=current.revision,
        expected_board_version=board_version,
        current_board_version=current_version,
    )


# --- what people list ---


@dataclass(frozen=True)
class ItemListing:
    item: InboxItem
    agent_name: str
    owner_key: str


def list_items(
    session: Session,
    *,
    owner_key: str | None = None,
    agent_id: int | None = None,
    item_id: int | None = None,
    states: Sequence[ItemState] = (),
    unprocessed_only: bool = False,
    limit: int = 200,
) -> list[ItemListing]:
    query = (
        select(*ITEM_COLUMNS, Agent.name.label("agent_name"), User.key.label("owner_key"))
        .join(Agent, Agent.id == InboxItemRow.agent_id)
        .join(User, User.id == Agent.user_id)
    )
    if owner_key is not None:
        find_owner_id(session, owner_key)
        query = query.where(User.key == owner_key)
    if agent_id is not None:
        query = query.where(InboxItemRow.agent_id == agent_id)
    if item_id is not None:
        query = query.where(InboxItemRow.id == item_id)
    if states:
        query = query.where(InboxItemRow.state.in_([s.value for s in states]))
    if unprocessed_only:
        query = query.where(has_unprocessed_reply())
    rows = session.execute(query.order_by(InboxItemRow.id).limit(limit)).all()
    return [
        ItemListing(item=item_from_row(row), agent_name=row.agent_name, owner_key=row.owner_key)
        for row in rows
    ]
