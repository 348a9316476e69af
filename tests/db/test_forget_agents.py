"""The operator's orphan sweep forgets the rows of Agents deleted while it was down, and
only those: an Agent created while the sweep's listing was being taken is not in that
listing, and its row must survive (`achilles bench steady-state` found such agents
forgotten, never to be scheduled)."""

from __future__ import annotations

from sqlalchemy import Engine, text

from achilles.db.database import Database
from achilles.services import agents
from tests.db.factories import make_agent


def _link(db: Engine, agent_id: int, uid: str) -> None:
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agents SET cr_uid = :uid WHERE id = :id"), {"uid": uid, "id": agent_id}
        )


def _ids(db: Engine) -> set[int]:
    with db.begin() as conn:
        return set(conn.execute(text("SELECT id FROM agents")).scalars())


def test_only_rows_older_than_the_listing_are_judged(db: Engine, database_url: str) -> None:
    database = Database(database_url)
    try:
        live = make_agent(db)
        deleted = make_agent(db)
        _link(db, live, "uid-live")
        _link(db, deleted, "uid-deleted")
        listed_at = agents.database_clock(database)
        created_during_listing = make_agent(db)
        _link(db, created_during_listing, "uid-new")

        forgotten = agents.forget_agents_not_in(database, {"uid-live"}, listed_at=listed_at)

        assert forgotten == [deleted]
        assert _ids(db) == {live, created_during_listing}
    finally:
        database.dispose()
