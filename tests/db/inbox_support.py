"""Small helpers for the inbox database tests: one committed transaction per call."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.inbox import board as inbox
from achilles.db.inbox import replies as inbox_replies
from achilles.domain.inbox import AckStatus, Board, InboxItem, ItemState, ReplyChannel, ReplyKind


def ask(
    engine: Engine,
    agent_id: int,
    key: str = "db-choice",
    question: str = "Which database should the report use?",
    context: str | None = None,
    state: ItemState | None = ItemState.BLOCKED,
    *,
    expected_revision: int | None = None,
    board_version: int | None = None,
) -> inbox.AskResult:
    with Session(engine) as session, session.begin():
        return inbox.ask(
            session,
            agent_id,
            key,
            question,
            context,
            state,
            expected_revision=expected_revision,
            board_version=board_version,
        )


def reply(
    engine: Engine,
    item_id: int,
    text_: str = "Use Postgres",
    channel: ReplyChannel = ReplyChannel.INBOX,
    kind: ReplyKind = ReplyKind.ANSWER,
) -> inbox_replies.ReplyWrite:
    with Session(engine) as session, session.begin():
        return inbox_replies.write_reply(session, item_id, text_, kind, channel)


def take(engine: Engine, item_id: int) -> InboxItem | None:
    with Session(engine) as session, session.begin():
        return inbox_replies.take_reply(session, item_id)


def acknowledge(engine: Engine, item_id: int, serial: int, outcome: str = "used it") -> AckStatus:
    with Session(engine) as session, session.begin():
        return inbox_replies.acknowledge(session, item_id, serial, outcome).status


def advance(
    engine: Engine,
    item_id: int,
    revision: int,
    board_version: int,
    target: ItemState,
    context: str | None = None,
) -> inbox.AdvanceResult:
    with Session(engine) as session, session.begin():
        return inbox.board_advance(
            session,
            item_id,
            expected_revision=revision,
            board_version=board_version,
            target=target,
            context=context,
        )


def read(engine: Engine, item_id: int) -> tuple[InboxItem, int]:
    with Session(engine) as session, session.begin():
        return inbox.get_item_and_board_version(session, item_id)


def board(engine: Engine, agent_id: int) -> Board:
    with Session(engine) as session, session.begin():
        return inbox.read_board(session, agent_id)


def unprocessed(engine: Engine, agent_id: int) -> list[int]:
    with Session(engine) as session, session.begin():
        return [item.id for item in inbox_replies.list_unprocessed_replies(session, agent_id)]


def raw_row(engine: Engine, item_id: int) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT * FROM agent_inbox_items WHERE id = :id"), {"id": item_id}
        ).one()
    return dict(row._mapping)
