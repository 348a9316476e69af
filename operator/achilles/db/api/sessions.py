"""The web inbox's sessions (`api_sessions`, migration 0016) and an owner's standing.

A session row is keyed by the SHA-256 of the random id its cookie carries, so the table
alone lets nobody forge a cookie. The caller owns the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, delete, func, select, update
from sqlalchemy.orm import Session

from achilles.db.api.models import WebSession
from achilles.db.journal.models import User


@dataclass(frozen=True)
class SessionRow:
    user_key: str
    live: bool  # not ended and not expired
    owner_active: bool  # the owner's `users.active` (a person with no row: True)


def start_session(session: Session, id_sha256: bytes, user_key: str, expires_at: datetime) -> None:
    session.add(WebSession(id_sha256=id_sha256, user_key=user_key, expires_at=expires_at))


def end_session(session: Session, id_sha256: bytes) -> bool:
    """End the session; False when it had ended (or never was)."""
    result = session.execute(
        update(WebSession)
        .where(WebSession.id_sha256 == id_sha256, WebSession.ended_at.is_(None))
        .values(ended_at=func.now())
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def find_session(connection: Connection, id_sha256: bytes) -> SessionRow | None:
    row = connection.execute(
        select(
            WebSession.user_key,
            (WebSession.ended_at.is_(None) & (WebSession.expires_at > func.now())).label("live"),
            func.coalesce(User.active, True).label("active"),
        )
        .outerjoin(User, User.key == WebSession.user_key)
        .where(WebSession.id_sha256 == id_sha256)
    ).one_or_none()
    if row is None:
        return None
    return SessionRow(user_key=row.user_key, live=bool(row.live), owner_active=bool(row.active))


def is_owner_active(connection: Connection, user_key: str) -> bool:
    """`users.active` of the key; a person with no row is not deactivated (they own
    nothing yet, and the owner scope shows them nothing)."""
    active = connection.execute(select(User.active).where(User.key == user_key)).scalar()
    return True if active is None else bool(active)


def purge_expired_sessions(session: Session) -> int:
    result = session.execute(delete(WebSession).where(WebSession.expires_at < func.now()))
    return int(result.rowcount)  # type: ignore[attr-defined]
