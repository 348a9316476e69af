"""Typed models of the outbox and the budget warnings; the schema is `0014_notifications`."""

from __future__ import annotations

import uuid
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
    SmallInteger,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from achilles.db import checks
from achilles.db.journal.models import Base, timestamp_column


class NotificationOutbox(Base):
    """One notification to the platform's webhook, written in the transaction of the
    change it announces and delivered at least once by the operator's notifier."""

    __tablename__ = "notification_outbox"
    __table_args__ = (
        UniqueConstraint("delivery_id"),
        CheckConstraint(checks.NOTIFICATION_KIND_CHECK, name="kind"),
        CheckConstraint(checks.DELIVERY_STATE_CHECK, name="state"),
        CheckConstraint(checks.DELIVERED_WHEN_DONE_CHECK, name="delivered_at"),
        CheckConstraint("attempts >= 0", name="attempts"),
        Index(
            "ix_notification_outbox_due",
            "next_attempt_at",
            "id",
            postgresql_where=text(checks.PENDING_DELIVERY_PREDICATE),
        ),
        Index("ix_notification_outbox_created_at", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    # The receiver's idempotency key: the same on every attempt of this notification.
    delivery_id: Mapped[uuid.UUID] = mapped_column(
        UUID(as_uuid=True), nullable=False, server_default=text("gen_random_uuid()")
    )
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    payload: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    state: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'pending'"))
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    next_attempt_at: Mapped[datetime] = timestamp_column()
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = timestamp_column()
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class BudgetWarning(Base):
    """A threshold of the weekly budget an owner's tokens crossed: once per
    (owner, week, threshold), whichever replica saw it first."""

    __tablename__ = "budget_warnings"
    __table_args__ = (
        CheckConstraint(checks.BUDGET_THRESHOLD_CHECK, name="threshold"),
        Index("ix_budget_warnings_window_start", "window_start"),
    )

    user_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    window_start: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True)
    threshold: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    used: Mapped[int] = mapped_column(BigInteger, nullable=False)
    budget: Mapped[int] = mapped_column(BigInteger, nullable=False)
    created_at: Mapped[datetime] = timestamp_column()
