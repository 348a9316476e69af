"""The notifier's queries on the outbox: claim what is due, record how an attempt went.

A claim moves the rows' `next_attempt_at` a lease ahead and counts the attempt, in one
short transaction under FOR UPDATE SKIP LOCKED: two replicas never claim the same row at
once, and no transaction stays open while a receiver is called. A notifier that dies
after sending and before recording leaves its rows to be claimed again when the lease
ends: sent twice, never lost (at least once; the receiver deduplicates by delivery id).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, select, text, update
from sqlalchemy.dialects.postgresql import INTERVAL, JSONB
from sqlalchemy.orm import Session

from achilles.db.outbox.models import NotificationOutbox
from achilles.domain.notifications import DeliveryState


@dataclass(frozen=True)
class ClaimedNotification:
    id: int
    delivery_id: uuid.UUID
    kind: str
    payload: dict[str, Any]
    created_at: datetime
    attempts: int  # this attempt's number, from 1


_CLAIM = text(
    """
    UPDATE notification_outbox o
    SET attempts = o.attempts + 1, next_attempt_at = now() + :lease
    FROM (
        SELECT id FROM notification_outbox
        WHERE state = 'pending' AND next_attempt_at <= now()
        ORDER BY next_attempt_at, id
        LIMIT :batch
        FOR UPDATE SKIP LOCKED
    ) due
    WHERE o.id = due.id
    RETURNING o.id, o.delivery_id, o.kind, o.payload, o.created_at, o.attempts
    """
).bindparams(bindparam("lease", type_=INTERVAL))


def claim_due(session: Session, *, batch: int, lease: timedelta) -> list[ClaimedNotification]:
    rows = session.execute(_CLAIM, {"lease": lease, "batch": batch}).all()
    claimed = [
        ClaimedNotification(
            id=row.id,
            delivery_id=row.delivery_id,
            kind=row.kind,
            payload=row.payload,
            created_at=row.created_at,
            attempts=row.attempts,
        )
        for row in rows
    ]
    return sorted(claimed, key=lambda n: n.id)


def record_delivered(session: Session, ids: Sequence[int]) -> None:
    """Delivered, whichever attempt it was (a second replica's after a lost lease too)."""
    if not ids:
        return
    session.execute(
        update(NotificationOutbox)
        .where(NotificationOutbox.id.in_(list(ids)))
        .where(NotificationOutbox.state == DeliveryState.PENDING)
        .values(state=DeliveryState.DELIVERED, delivered_at=func.now(), last_error=None)
    )


def record_failed(
    session: Session, notification_id: int, error: str, *, retry_in: timedelta | None
) -> bool:
    """The attempt failed: retry after `retry_in`, or dead (None). False when the row
    was delivered or is dead already (another replica's attempt)."""
    values: dict[str, Any] = {"last_error": error[:2000]}
    if retry_in is None:
        values["state"] = DeliveryState.DEAD
    else:
        values["next_attempt_at"] = func.now() + retry_in
    result = session.execute(
        update(NotificationOutbox)
        .where(NotificationOutbox.id == notification_id)
        .where(NotificationOutbox.state == DeliveryState.PENDING)
        .values(**values)
        .returning(NotificationOutbox.id)
    )
    return result.first() is not None


def release_unattempted(session: Session, ids: Sequence[int], *, retry_in: timedelta) -> None:
    """Claimed rows the notifier did not try (the receiver failed an earlier one of the
    batch): their attempt is given back, due again with the one that failed."""
    if not ids:
        return
    session.execute(
        update(NotificationOutbox)
        .where(NotificationOutbox.id.in_(list(ids)))
        .where(NotificationOutbox.state == DeliveryState.PENDING)
        .values(
            attempts=NotificationOutbox.attempts - 1,
            next_attempt_at=func.now() + retry_in,
        )
    )


def seconds_until_next_due(session: Session) -> float | None:
    """When the earliest pending row is due (0 when it is due now); None: nothing pending."""
    due = session.execute(
        select(
            func.extract("epoch", func.min(NotificationOutbox.next_attempt_at) - func.now())
        ).where(NotificationOutbox.state == DeliveryState.PENDING)
    ).scalar_one()
    return None if due is None else max(0.0, float(due))


@dataclass(frozen=True)
class OutboxRow:
    id: int
    delivery_id: uuid.UUID
    kind: str
    state: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime
    delivered_at: datetime | None
    last_error: str | None
    payload: dict[str, Any]


def list_notifications(
    session: Session, *, state: DeliveryState | None, limit: int
) -> list[OutboxRow]:
    """The newest notifications first (of one state when given)."""
    query = select(NotificationOutbox).order_by(NotificationOutbox.id.desc()).limit(limit)
    if state is not None:
        query = query.where(NotificationOutbox.state == state)
    return [
        OutboxRow(
            id=row.id,
            delivery_id=row.delivery_id,
            kind=row.kind,
            state=row.state,
            attempts=row.attempts,
            created_at=row.created_at,
            next_attempt_at=row.next_attempt_at,
            delivered_at=row.delivered_at,
            last_error=row.last_error,
            payload=row.payload,
        )
        for row in session.execute(query).scalars()
    ]


def retry_dead(session: Session) -> int:
    """Every dead notification pending again, due now, its attempts counted afresh."""
    result = session.execute(
        update(NotificationOutbox)
        .where(NotificationOutbox.state == DeliveryState.DEAD)
        .values(state=DeliveryState.PENDING, attempts=0, next_attempt_at=func.now())
        .returning(NotificationOutbox.id)
    )
    return len(result.all())


def enqueue(
    session: Session, kind: str, *, owner: int | None, agent: int | None, details: dict[str, Any]
) -> None:
    """Write a notification in the caller's transaction (nothing when no webhook is set):
    `achilles_enqueue_notification` of 0014, as the triggers do."""
    session.execute(
        select(
            func.achilles_enqueue_notification(
                kind, owner, agent, bindparam("details", details, type_=JSONB)
            )
        )
    )
