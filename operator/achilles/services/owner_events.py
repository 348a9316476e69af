"""Reading the owners' event log (`achilles.db.api.events`), one transaction per read."""

from __future__ import annotations

from datetime import timedelta

from achilles.db.api import events as log
from achilles.db.api.events import Event, EventPosition, SettledEvents
from achilles.db.database import Database

# How long the log keeps events: a client may resume (Last-Event-ID) within this.
RETENTION = timedelta(hours=24)

__all__ = ["Event", "EventPosition", "SettledEvents"]


def start_position(database: Database) -> EventPosition:
    with database.transaction() as session:
        return log.current_position(session)


def settled_after(database: Database, after: EventPosition, limit: int) -> SettledEvents:
    with database.transaction() as session:
        return log.settled_after(session, after, limit)


def missed_events(
    database: Database, owner_key: str, after: EventPosition, upto: EventPosition, limit: int
) -> list[Event]:
    """What `owner_key` missed in (after, upto]: a resuming client's catch-up."""
    with database.transaction() as session:
        return log.owner_events_between(session, owner_key, after, upto, limit)


def purge_old_events(database: Database, age: timedelta = RETENTION) -> int:
    with database.transaction() as session:
        return log.purge_older_than(session, age)
