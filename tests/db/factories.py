"""Small builders for rows the database tests need (through the real db layer)."""

from __future__ import annotations

import itertools
from typing import Any

from sqlalchemy import Engine, insert, text, update
from sqlalchemy.orm import Session

from achilles.db.journal.agents import create_agent
from achilles.db.journal.models import AgentModel, PlatformSettings
from achilles.db.journal.users import upsert_user

_counter = itertools.count(1)


def make_owner(engine: Engine, key: str | None = None, *, timezone: str | None = None) -> str:
    key = key or f"user{next(_counter)}"
    with Session(engine) as session, session.begin():
        upsert_user(session, key, timezone=timezone, active=True)
    return key


def make_model(engine: Engine, name: str | None = None) -> str:
    name = name or f"model{next(_counter)}"
    with Session(engine) as session, session.begin():
        session.execute(
            insert(AgentModel).values(
                name=name, base_url="http://127.0.0.1:1/v1", provider_model="m"
            )
        )
    return name


def make_agent(engine: Engine, owner: str | None = None, **overrides: Any) -> int:
    owner = owner or make_owner(engine)
    fields: dict[str, Any] = {"name": f"agent{next(_counter)}", "prompt": "Summarise my week."}
    if "model_name" not in overrides:
        fields["model_name"] = make_model(engine)
    fields.update(overrides)
    with Session(engine) as session, session.begin():
        return create_agent(session, owner_key=owner, **fields)


def set_settings(engine: Engine, **values: Any) -> None:
    with Session(engine) as session, session.begin():
        session.execute(update(PlatformSettings).where(PlatformSettings.id == 1).values(**values))


def model_of(engine: Engine, cr_name: str) -> int | None:
    """The model id of the Agent row mirrored from the CR named `cr_name` (None: none)."""
    with engine.connect() as conn:
        model_id = conn.execute(
            text("SELECT model_id FROM agents WHERE cr_name = :n"), {"n": cr_name}
        ).scalar_one()
    return None if model_id is None else int(model_id)
