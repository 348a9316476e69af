"""Users, the owners of agents, for standalone installs that have no Auth service."""

from __future__ import annotations

from achilles.db.database import Database
from achilles.db.journal import users
from achilles.db.journal.users import UserUpsert
from achilles.domain.users import check_user_key


def upsert_user(database: Database, key: str, *, timezone: str | None, active: bool) -> UserUpsert:
    """Create or update a user (`timezone=None` keeps an existing zone).

    Deactivating writes enabled=false on the user's agents (no third lock); reactivating
    does not switch them back on: that is the owner's choice.
    """
    check_user_key(key)
    with database.transaction() as session:
        return users.upsert_user(session, key, timezone=timezone, active=active)
