"""What the database tests of the operator's reconciles share: one Agent event handled as
the operator handles it, and whether a connection of the test database waits on a lock
(how a race test knows the other side is blocked, not merely slow), and the race itself:
a contender blocked by a transaction held open, until that commits."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.k8s.resources.agent import AgentSpec
from achilles.services import agent_events
from tests.waiting import wait_for

T = TypeVar("T")


def reconcile_event(
    database: Database, name: str, owner: str, *, uid: str | None = None, **spec: Any
) -> agent_events.AgentReconciled:
    """One event of Agent `team/<name>` (uid `uid-<name>` unless given) saying `spec`."""
    obj = agent_events.AgentObject(
        uid=uid or f"uid-{name}",
        namespace="team",
        name=name,
        generation=1,
        spec=AgentSpec.model_validate({"owner": owner, "prompt": "Summarise.", **spec}),
        status={"databaseId": 1},
    )
    return agent_events.reconcile_agent(database, obj)


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


def blocked_until_commit(
    db: Engine,
    holder: Session,
    contender: Callable[[], T],
    what: str,
    *,
    meanwhile: Callable[[], None] | None = None,
) -> T:
    """Run `contender` on a connection of its own while `holder`'s transaction is open;
    once it waits on a lock (`what`: on which), run `meanwhile` (what the holder sees
    then) and commit the holder. The contender's result, once the commit let it go on."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(contender)
        wait_for(lambda: waiting_on_a_lock(db) or future.done(), timeout=30, what=what)
        assert not future.done(), f"it did not wait: {what}"
        if meanwhile is not None:
            meanwhile()
        holder.commit()
        return future.result(timeout=30)
