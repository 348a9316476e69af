"""The owners' event log (`owner_events`, migration 0010_api) and its NOTIFY channel.

Triggers append one row per change of an inbox item or a run, and NOTIFY
`achilles_events` (empty payload: the log is what is read). A position in the log is
(txid, id): the writing transaction's id, then the row's. Ids alone would not do:
a sequence hands ids out in the order transactions *write*, not the order they commit, so
a reader that passed id 11 could later see id 10 commit and never look back. Instead a
reader only takes rows whose txid is below the oldest transaction still running
(`pg_snapshot_xmin`): every such transaction has ended, so nothing can appear behind them
later. Rows of a transaction still running behind them are *unsettled*: committed but
not yet safe to pass; the reader tries again shortly (`SettledEvents.unsettled`).

A position is therefore a resumable cursor: every event after it, for anyone, is either
in the log now (settled) or still to come. `GET /v1/events` hands it out as the SSE event
id, and `Last-Event-ID` resumes from it on any replica.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
from sqlalchemy import Row, delete, func, literal, select, text, tuple_
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session

from achilles.db.api.models import OwnerEvent
from achilles.db.journal.models import User
from achilles.db.notifications import libpq_dsn
from achilles.errors import InvalidInputError

log = logging.getLogger(__name__)

EVENTS_CHANNEL = "achilles_events"
_TOKEN = re.compile(r"^(\d{1,19})-(\d{1,19})$")
_MAX = 2**63 - 1
# The oldest running transaction's id, as a bigint like `owner_events.txid`.
_XMIN = text("pg_snapshot_xmin(pg_current_snapshot())::text::bigint")


@dataclass(frozen=True, order=True)
class EventPosition:
    txid: int
    id: int

    @property
    def token(self) -> str:
        return f"{self.txid}-{self.id}"

    @classmethod
    def parse(cls, token: str) -> EventPosition:
        match = _TOKEN.match(token.strip())
        if match is None or max(int(match[1]), int(match[2])) > _MAX:
            raise InvalidInputError(
                f"not an event id of this API (got {token[:40]!r}; expected e.g. '1234-56')"
            )
        return cls(int(match[1]), int(match[2]))


@dataclass(frozen=True)
class Event:
    position: EventPosition
    owner_key: str
    kind: str  # inbox_item | run
    agent_id: int
    object_id: int


def _columns() -> tuple[object, ...]:
    return (
        OwnerEvent.txid,
        OwnerEvent.id,
        User.key,
        OwnerEvent.kind,
        OwnerEvent.agent_id,
        OwnerEvent.object_id,
    )


def _event(row: Row[Any]) -> Event:
    txid, id_, owner_key, kind, agent_id, object_id = tuple(row)[:6]
    return Event(EventPosition(txid, id_), owner_key, kind, agent_id, object_id)


def _after(position: EventPosition) -> object:
    return tuple_(OwnerEvent.txid, OwnerEvent.id) > tuple_(
        literal(position.txid), literal(position.id)
    )


def current_position(session: Session) -> EventPosition:
    """A position with nothing settled after it yet: where a new reader starts."""
    xmin: int = session.execute(select(_XMIN)).scalar_one()
    return EventPosition(xmin, 0)


@dataclass(frozen=True)
class SettledEvents:
    events: list[Event]
    # Rows after these exist but wait for an older transaction to end; read again soon.
    unsettled: bool
    # The batch was cut at the limit: read again at once.
    more: bool


def settled_after(session: Session, after: EventPosition, limit: int) -> SettledEvents:
    """Every owner's settled events after `after`, oldest first, at most `limit`."""
    rows = session.execute(
        select(*_columns(), (OwnerEvent.txid < _XMIN).label("settled"))  # type: ignore[call-overload]
        .join(User, User.id == OwnerEvent.user_id)
        .where(_after(after))
        .order_by(OwnerEvent.txid, OwnerEvent.id)
        .limit(limit)
    ).all()
    settled = [_event(row) for row in rows if row.settled]
    return SettledEvents(
        events=settled, unsettled=len(settled) < len(rows), more=len(rows) == limit
    )


def owner_events_between(
    session: Session, owner_key: str, after: EventPosition, upto: EventPosition, limit: int
) -> list[Event]:
    """One owner's events in (after, upto], oldest first, at most `limit` (a resuming
    reader's catch-up; `upto` is a position the caller knows to be settled)."""
    rows = session.execute(
        select(*_columns())  # type: ignore[call-overload]
        .join(User, User.id == OwnerEvent.user_id)
        .where(
            User.key == owner_key,
            _after(after),
            tuple_(OwnerEvent.txid, OwnerEvent.id) <= tuple_(literal(upto.txid), literal(upto.id)),
        )
        .order_by(OwnerEvent.txid, OwnerEvent.id)
        .limit(limit)
    ).all()
    return [_event(row) for row in rows]


def purge_older_than(session: Session, age: timedelta) -> int:
    result = session.execute(delete(OwnerEvent).where(OwnerEvent.created_at < func.now() - age))
    return int(result.rowcount)  # type: ignore[attr-defined]


async def notifications(url: URL, *, retry_seconds: float = 1.0) -> AsyncIterator[None]:
    """Yield once on every (re)connection (something may have been missed meanwhile) and
    once per NOTIFY on `achilles_events`; reconnect for ever when the database goes."""
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(
                libpq_dsn(url), autocommit=True, connect_timeout=10
            ) as conn:
                await conn.execute(f"LISTEN {EVENTS_CHANNEL}")
                yield
                async for _ in conn.notifies():
                    yield
        except psycopg.Error as exc:
            log.warning("event listener lost the database: %s; retrying", exc)
            await asyncio.sleep(retry_seconds)
