"""Typed models of the Agent Inbox tables (seed 003); the schema is migration `0003_inbox`.

The CHECK constraints make impossible rows unrepresentable whatever writes
them: a reply comes with its kind, channel, time and serial or not at all; a
reply can be seen only if it exists, and acknowledged only once seen. The
rules *between* rows and over time (compare-and-swap, the two channels) live in
`achilles.domain.inbox` and their SQL in `achilles.db.inbox.board`.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from achilles.db import checks
from achilles.db.journal.models import Base, timestamp_column


class InboxBoard(Base):
    """One board per agent; `board_version` is the board half of `board_advance`'s CAS."""

    __tablename__ = "agent_inbox_boards"
    __table_args__ = (CheckConstraint("board_version >= 0", name="version_non_negative"),)

    agent_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True
    )
    board_version: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    created_at: Mapped[datetime] = timestamp_column()
    updated_at: Mapped[datetime] = timestamp_column()


class InboxItemRow(Base):
    """One question or dependency of an agent: one key, one row."""

    __tablename__ = "agent_inbox_items"
    __table_args__ = (
        UniqueConstraint("agent_id", "key"),
        CheckConstraint(checks.ITEM_STATE_CHECK, name="state"),
        CheckConstraint(checks.REPLY_KIND_CHECK, name="reply_kind"),
        CheckConstraint(checks.REPLY_CHANNEL_CHECK, name="reply_channel"),
        CheckConstraint("key <> ''", name="key_not_empty"),
        CheckConstraint("btrim(question) <> ''", name="question_not_blank"),
        CheckConstraint("revision >= 1", name="revision_positive"),
        CheckConstraint("reply_serial >= 0", name="reply_serial_non_negative"),
        # A reply is whole or absent; the serial counts accepted replies.
        CheckConstraint(
            "(reply IS NULL) = (reply_kind IS NULL)"
            " AND (reply IS NULL) = (reply_channel IS NULL)"
            " AND (reply IS NULL) = (handled_at IS NULL)"
            " AND (reply IS NULL) = (reply_serial = 0)",
            name="reply_complete",
        ),
        CheckConstraint("reply_seen_at IS NULL OR reply IS NOT NULL", name="seen_needs_reply"),
        CheckConstraint("outcome IS NULL OR reply_seen_at IS NOT NULL", name="outcome_needs_take"),
        Index(
            "ix_agent_inbox_items_unprocessed",
            "agent_id",
            "handled_at",
            postgresql_where=text(checks.UNPROCESSED_REPLY_PREDICATE),
        ),
        Index("ix_agent_inbox_items_state", "state"),
        # 0010_api: an owner's inbox, blocked first, and an owner's items in one state.
        CheckConstraint("reply_by IS NULL OR reply IS NOT NULL", name="reply_by_needs_reply"),
        Index("ix_agent_inbox_items_owner_queue", "user_id", text("(state <> 'blocked')"), "id"),
        Index("ix_agent_inbox_items_user_id_state_id", "user_id", "state", "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    # Items hang off their board, so every item's agent has a board row to version.
    agent_id: Mapped[int] = mapped_column(
        BigInteger,
        ForeignKey("agent_inbox_boards.agent_id", ondelete="CASCADE"),
        nullable=False,
    )
    # The agent's owner, kept by triggers (0010_api): set on insert, follows the agent.
    user_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False
    )
    key: Mapped[str] = mapped_column(Text, nullable=False)
    state: Mapped[str] = mapped_column(Text, nullable=False)
    question: Mapped[str] = mapped_column(Text, nullable=False)
    context: Mapped[str | None] = mapped_column(Text)
    revision: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("1"))
    reply: Mapped[str | None] = mapped_column(Text)
    reply_kind: Mapped[str | None] = mapped_column(Text)
    reply_channel: Mapped[str | None] = mapped_column(Text)
    reply_serial: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    handled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    reply_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    outcome: Mapped[str | None] = mapped_column(Text)
    # Who gave the current reply: the API's caller; NULL through the database (the CLI).
    reply_by: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = timestamp_column()
    updated_at: Mapped[datetime] = timestamp_column()


class InboxItemRevision(Base):
    """One row per revision of an item, written by a trigger (0010_api) whatever bumped it:
    `asked` (created), `replied` (a human's accepted reply: what, how, by whom) or
    `updated` (re-asked or advanced: what the item then said)."""

    __tablename__ = "agent_inbox_item_revisions"
    __table_args__ = (
        CheckConstraint("change IN ('asked', 'replied', 'updated')", name="change"),
        CheckConstraint(checks.ITEM_STATE_CHECK, name="state"),
        CheckConstraint(
            "(change = 'replied') = (reply IS NOT NULL)"
            " AND (reply IS NULL) = (reply_kind IS NULL)"
            " AND (reply IS NULL) = (reply_channel IS NULL)"
            " AND (change = 'replied') <> (question IS NOT NULL)",
            name="shape",
        ),
    )

    item_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("agent_inbox_items.id", ondelete="CASCADE"), primary_key=True
    )
    revision: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    change: Mapped[str] = mapped_column(Text, nullable=False)
    state: Mapped[str] = mapped_column(Text, nullable=False)
    question: Mapped[str | None] = mapped_column(Text)
    context: Mapped[str | None] = mapped_column(Text)
    reply: Mapped[str | None] = mapped_column(Text)
    reply_kind: Mapped[str | None] = mapped_column(Text)
    reply_channel: Mapped[str | None] = mapped_column(Text)
    reply_serial: Mapped[int] = mapped_column(BigInteger, nullable=False)
    reply_by: Mapped[str | None] = mapped_column(Text)
    at: Mapped[datetime] = timestamp_column()


class ReplyWake(Base):
    """Whether the wake a reply asks for was answered (0016_seed_rules_two): written by a
    trigger on `agent_runs`, so it survives the runs that retention deletes and a cancel
    that ends a wake run before it started. The row is about the item's reply
    `reply_serial`; a newer reply starts afresh. `lost`: wakes of this reply that came to
    nothing (an `already_running` skip, a cancel before the start); the next wake's
    request key counts them."""

    __tablename__ = "inbox_reply_wakes"
    __table_args__ = (
        CheckConstraint("reply_serial >= 1", name="serial_positive"),
        CheckConstraint("lost >= 0", name="lost_non_negative"),
    )

    item_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("agent_inbox_items.id", ondelete="CASCADE"), primary_key=True
    )
    reply_serial: Mapped[int] = mapped_column(BigInteger, nullable=False)
    answered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    lost: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
