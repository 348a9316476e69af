"""Typed models of the API's tables; the schema is migrations `0010_api` and
`0016_search_path` (`api_sessions`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from achilles.db.journal.models import Base, timestamp_column


class OwnerEvent(Base):
    """Something of an owner's changed: an inbox item or a run (ids only, never content).

    Written by triggers on `agent_inbox_items` and `agent_runs`; `txid` is the writing
    transaction's id, which orders the log safely (`achilles.db.api.events`)."""

    __tablename__ = "owner_events"
    __table_args__ = (
        CheckConstraint("kind IN ('inbox_item', 'run')", name="kind"),
        Index("ix_owner_events_txid_id", "txid", "id"),
        Index("ix_owner_events_user_id_txid_id", "user_id", "txid", "id"),
        Index("ix_owner_events_created_at", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    txid: Mapped[int] = mapped_column(
        BigInteger, nullable=False, server_default=text("(pg_current_xact_id()::text::bigint)")
    )
    user_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False
    )
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    agent_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    object_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    created_at: Mapped[datetime] = timestamp_column()


class IdempotencyKey(Base):
    """A caller's `Idempotency-Key` and the response it got, committed with its write."""

    __tablename__ = "api_idempotency_keys"
    __table_args__ = (
        CheckConstraint("length(key) BETWEEN 1 AND 255", name="key_length"),
        Index("ix_api_idempotency_keys_created_at", "created_at"),
    )

    user_key: Mapped[str] = mapped_column(Text, primary_key=True)
    key: Mapped[str] = mapped_column(Text, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(Text, nullable=False)
    # NULL only inside the claiming transaction: the response commits with the write.
    response_status: Mapped[int | None] = mapped_column(Integer)
    response_body: Mapped[Any | None] = mapped_column(JSONB)
    response_headers: Mapped[dict[str, str] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = timestamp_column()


class WebSession(Base):
    """A web inbox session, server-side: the cookie names it by a random id, stored here
    only as its SHA-256. Sign-out sets `ended_at`, which every replica reads."""

    __tablename__ = "api_sessions"
    __table_args__ = (
        CheckConstraint("length(id_sha256) = 32", name="id_sha256_length"),
        Index("ix_api_sessions_expires_at", "expires_at"),
        Index("ix_api_sessions_user_key", "user_key"),
    )

    id_sha256: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    user_key: Mapped[str] = mapped_column(Text, nullable=False)
    created_at: Mapped[datetime] = timestamp_column()
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
