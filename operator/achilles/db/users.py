"""Users, for standalone installs that have no Auth service to own them."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from achilles.db.agents import disable_agents_of
from achilles.db.models import User


@dataclass(frozen=True)
class UserUpsert:
    user_id: int
    created: bool
    agents_disabled: int


def upsert_user(session: Session, key: str, *, timezone: str | None, active: bool) -> UserUpsert:
    """Create or update a user. `timezone=None` leaves an existing user's zone as it is."""
    existed = session.execute(select(User.id).where(User.key == key)).scalar_one_or_none()
    changes: dict[str, object] = {"active": active}
    if timezone is not None:
        changes["timezone"] = timezone
    user_id = session.execute(
        insert(User)
        .values(key=key, timezone=timezone, active=active)
        .on_conflict_do_update(index_elements=[User.key], set_=changes)
        .returning(User.id)
    ).scalar_one()
    disabled = 0 if active else disable_agents_of(session, user_id)
    return UserUpsert(user_id=user_id, created=existed is None, agents_disabled=disabled)
