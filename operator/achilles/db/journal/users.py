"""Users, the owners of agents: looked up by key, and written for standalone installs
that have no Auth service to own them (deactivating one switches its agents off)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, User
from achilles.db.journal.owed_spec import owing, owner_deactivated
from achilles.errors import NotFound


def find_owner_id(session: Session, key: str) -> int:
    """The id of the user with this key; `NotFound` names it as an agent owner."""
    user_id = session.execute(select(User.id).where(User.key == key)).scalar_one_or_none()
    if user_id is None:
        raise NotFound(f"owner {key!r} does not exist")
    return user_id


@dataclass(frozen=True)
class Owner:
    user_id: int
    active: bool


@dataclass(frozen=True)
class UserUpsert:
    user_id: int
    created: bool
    # False when the user already existed exactly so: nothing was written.
    changed: bool
    agents_disabled: int


def upsert_user(session: Session, key: str, *, timezone: str | None, active: bool) -> UserUpsert:
    """Create or update a user. `timezone=None` leaves an existing user's zone as it is."""
    existing = session.execute(
        select(User.id, User.timezone, User.active).where(User.key == key).with_for_update()
    ).first()
    wanted_zone = timezone if timezone is not None else existing.timezone if existing else None
    if existing is not None and (existing.timezone, existing.active) == (wanted_zone, active):
        disabled = 0 if active else disable_agents_of(session, existing.id)
        return UserUpsert(existing.id, created=False, changed=False, agents_disabled=disabled)
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
    return UserUpsert(
        user_id=user_id, created=existing is None, changed=True, agents_disabled=disabled
    )


def disable_agents_of(session: Session, user_id: int) -> int:
    """Owner deactivation writes the owner's own switch (no third lock, seed 000); each
    Agent resource is owed `spec.enabled: false`, which the operator delivers."""
    result = session.execute(
        update(Agent)
        .where(Agent.user_id == user_id, Agent.enabled.is_(True))
        .values(enabled=False, next_run_at=None, meta=owing(owner_deactivated()))
        .returning(Agent.id)
    )
    return len(result.all())
