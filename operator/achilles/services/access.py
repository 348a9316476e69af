"""Whether a person the API recognised may still act: their owner row is active and, for
the web inbox, their session has not ended (issue 37).

Identity (a verified token, a signed cookie) says who someone is; this says whether they
still may: an owner whose `users.active` went false is refused (403) whatever they hold,
and a web session signed out is over on every replica, whatever copy of its cookie is
left. The session's id is random (the cookie carries it, signed); its row holds only the
id's SHA-256, like a run's secret.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from achilles.db.api import sessions as rows
from achilles.db.database import Database

_ID_BYTES = 32


@dataclass(frozen=True)
class SessionStanding:
    user_key: str | None  # None: no such session (never was, or purged)
    live: bool
    owner_active: bool


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()


def start_web_session(database: Database, user_key: str, lifetime: timedelta) -> str:
    """A new session for `user_key`; returns its id (for the signed cookie only)."""
    session_id = secrets.token_urlsafe(_ID_BYTES)
    with database.transaction() as session:
        rows.start_session(session, _digest(session_id), user_key, datetime.now(UTC) + lifetime)
    return session_id


def end_web_session(database: Database, session_id: str) -> bool:
    with database.transaction() as session:
        return rows.end_session(session, _digest(session_id))


def web_session_standing(database: Database, session_id: str) -> SessionStanding:
    with database.reads() as connection:
        found = rows.find_session(connection, _digest(session_id))
    if found is None:
        return SessionStanding(user_key=None, live=False, owner_active=True)
    return SessionStanding(found.user_key, found.live, found.owner_active)


def is_owner_active(database: Database, user_key: str) -> bool:
    with database.reads() as connection:
        return rows.is_owner_active(connection, user_key)


def purge_expired_sessions(database: Database) -> int:
    with database.transaction() as session:
        return rows.purge_expired_sessions(session)
