"""Idempotency keys: claim a caller's key, record the response, in the write's transaction.

`claim` inserts the key first thing in the transaction that does the write. The primary
key (user_key, key) makes a second request with the same key — another thread, another
replica — wait on the first one's insert until it commits or rolls back: committed, the
second finds the recorded response (and replays it); rolled back, the second claims the
key itself. So one key is one write, whatever the retries. A key older than the expiry
is claimed afresh in place. The caller owns the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from achilles.db.api.models import IdempotencyKey

# Attempts when a conflicting key expires (and is claimed afresh) between our insert and
# our read: each attempt waits for a committed other; more than two cannot happen.
_CLAIM_ATTEMPTS = 3


@dataclass(frozen=True)
class StoredKey:
    fingerprint: str
    status: int
    body: Any
    headers: dict[str, str]


def claim(
    session: Session, user_key: str, key: str, fingerprint: str, ttl: timedelta
) -> StoredKey | None:
    """Claim `key` for this transaction (None), or the response it already got."""
    expired = IdempotencyKey.created_at < func.now() - ttl
    for _ in range(_CLAIM_ATTEMPTS):
        proposed = insert(IdempotencyKey).values(
            user_key=user_key, key=key, fingerprint=fingerprint
        )
        claimed = session.execute(
            proposed.on_conflict_do_update(
                index_elements=[IdempotencyKey.user_key, IdempotencyKey.key],
                set_={
                    "fingerprint": proposed.excluded.fingerprint,
                    "response_status": None,
                    "response_body": None,
                    "response_headers": None,
                    "created_at": func.now(),
                },
                where=expired,
            ).returning(IdempotencyKey.key)
        ).first()
        if claimed is not None:
            return None
        row = session.execute(
            select(IdempotencyKey).where(
                IdempotencyKey.user_key == user_key, IdempotencyKey.key == key
            )
        ).scalar_one_or_none()
        if row is not None and row.response_status is not None:
            return StoredKey(
                fingerprint=row.fingerprint,
                status=row.response_status,
                body=row.response_body,
                headers=dict(row.response_headers or {}),
            )
    raise RuntimeError(f"idempotency key {key!r} could not be claimed or read")


def record(
    session: Session,
    user_key: str,
    key: str,
    *,
    status: int,
    body: Any,
    headers: dict[str, str],
) -> None:
    """The response of the claimed key (same transaction as the claim, or later amended)."""
    session.execute(
        update(IdempotencyKey)
        .where(IdempotencyKey.user_key == user_key, IdempotencyKey.key == key)
        .values(response_status=status, response_body=body, response_headers=headers)
    )


def release(session: Session, user_key: str, key: str) -> None:
    """Give the claimed key back (same transaction as the claim): nothing is remembered."""
    session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.user_key == user_key, IdempotencyKey.key == key)
    )


def purge_expired(session: Session, ttl: timedelta) -> int:
    """Forget keys past the expiry; returns how many."""
    result = session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.created_at < func.now() - ttl)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]
