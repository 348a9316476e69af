"""What the database tests of the operator's reconciles share: one Agent event handled as
the operator handles it, and whether a connection of the test database waits on a lock
(how a race test knows the other side is blocked, not merely slow)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.k8s.resources.agent import AgentSpec
from achilles.services import agents


def reconcile_event(
    database: Database, name: str, owner: str, *, uid: str | None = None, **spec: Any
) -> agents.AgentReconciled:
    """One event of Agent `team/<name>` (uid `uid-<name>` unless given) saying `spec`."""
    obj = agents.AgentObject(
        uid=uid or f"uid-{name}",
        namespace="team",
        name=name,
        generation=1,
        spec=AgentSpec.model_validate({"owner": owner, "prompt": "Summarise.", **spec}),
        status={"databaseId": 1},
    )
    return agents.reconcile_agent(database, obj)


def waiting_on_a_lock(db: Engine) -> bool:
    """A session of this database waits on a lock (a row, an advisory lock...)."""
    with db.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
        )
