"""Agents, the sweeper's side: what no Agent event tells the operator (an owner
deactivated in `users`, an Agent deleted while no operator ran) and the spec writes the
operator still owes. An Agent event's own reconcile is `services.agent_events`.
"""

from __future__ import annotations

from datetime import datetime

from achilles.db.database import Database
from achilles.db.journal import agent_row, owed_spec
from achilles.db.journal import agents as agent_rows
from achilles.db.journal.settings import database_now


def switch_off_agents_of_inactive_owners(database: Database) -> list[int]:
    """Owner deactivated in `users` (no Agent event tells the operator): the agents still
    on are switched off and their CRs owed `spec.enabled: false`. Derived from the rows
    each time, so it survives restarts and a second deactivation of the same owner."""
    with database.transaction() as session:
        return agent_rows.switch_off_agents_of_inactive_owners(session)


def owed_specs(database: Database) -> list[owed_spec.OwedSpec]:
    """Agent resources still owed a spec write (a withdrawn model, a deactivated owner)."""
    with database.transaction() as session:
        return owed_spec.owed_specs(session)


def spec_delivered(database: Database, owed: owed_spec.OwedSpec) -> None:
    """The resource now says what was owed (or is gone): stop owing it."""
    with database.transaction() as session:
        owed_spec.delivered(session, owed.agent_id, owed.writes)


def database_clock(database: Database) -> datetime:
    with database.transaction() as session:
        return database_now(session)


def forget_agents_not_in(
    database: Database, live_uids: set[str], *, listed_at: datetime
) -> list[int]:
    """Rows whose Agent CR no longer exists (deleted while no operator ran): removed.

    `live_uids` is a listing that began at `listed_at` (the database's clock): a row made
    since then may belong to an Agent created after the listing was taken, so only older
    rows are judged by it (`achilles bench steady-state` found new agents forgotten)."""
    with database.transaction() as session:
        rows = agent_rows.agent_uids(session, created_before=listed_at)
        gone = [uid for uid in rows if uid not in live_uids]
        return [
            agent_id for uid in gone if (agent_id := agent_row.delete_agent_by_uid(session, uid))
        ]
