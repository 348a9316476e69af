"""The owners' event log (0010_api): written by triggers, read in an order nothing can
later appear behind, even when transactions commit out of the order they wrote."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.api.housekeeping import forget_old_rows
from achilles.db.api import events
from achilles.db.api.events import EventPosition
from achilles.db.database import Database
from achilles.services import owner_events
from tests.db import inbox_support as box
from tests.db.factories import make_agent, make_owner
from tests.waiting import wait_for


def test_a_slow_writer_holds_back_later_events_until_it_ends(db: Engine, database_url: str) -> None:
    database = Database(database_url)
    try:
        alice, bob = make_owner(db), make_owner(db)
        alices, bobs = make_agent(db, alice), make_agent(db, bob)
        start = owner_events.start_position(database)

        # A writes first (the smaller event id) and stays open; B writes and commits.
        with Session(db) as slow:
            slow.begin()
            slow.execute(
                text("INSERT INTO agent_inbox_boards (agent_id) VALUES (:a)"), {"a": alices}
            )
            slow.execute(
                text(
                    "INSERT INTO agent_inbox_items (agent_id, key, state, question)"
                    " VALUES (:a, 'slow', 'blocked', 'Slow?')"
                ),
                {"a": alices},
            )
            fast_item = box.ask(db, bobs, key="fast").item

            held = owner_events.settled_after(database, start, 100)
            assert held.events == []
            assert held.unsettled  # B's event is there, but not safe to pass yet
            slow.commit()

        settled = owner_events.settled_after(database, start, 100)
        assert [(e.owner_key, e.kind) for e in settled.events] == [
            (alice, "inbox_item"),
            (bob, "inbox_item"),
        ]
        assert settled.events[1].object_id == fast_item.id
        assert not settled.unsettled
        positions = [e.position for e in settled.events]
        assert positions == sorted(positions)

        with db.begin() as conn:
            run_id = conn.execute(
                text(
                    "INSERT INTO agent_runs (agent_id, trigger, state)"
                    " VALUES (:a, 'manual', 'queued') RETURNING id"
                ),
                {"a": alices},
            ).scalar_one()
        with db.begin() as conn:  # a heartbeat is no news; a state change is
            conn.execute(
                text("UPDATE agent_runs SET heartbeat_at = now() WHERE id = :r"), {"r": run_id}
            )
        with db.begin() as conn:
            conn.execute(
                text("UPDATE agent_runs SET state = 'running', started_at = now() WHERE id = :r"),
                {"r": run_id},
            )
        after = owner_events.settled_after(database, positions[-1], 100).events
        assert [(e.kind, e.object_id) for e in after] == [("run", run_id), ("run", run_id)]

        missed = owner_events.missed_events(database, alice, start, after[-1].position, 100)
        assert [e.kind for e in missed] == ["inbox_item", "run", "run"]
    finally:
        database.dispose()


def test_event_ids_parse_or_say_what_they_should_be() -> None:
    assert EventPosition.parse("12-3") == EventPosition(12, 3)
    assert EventPosition(12, 3).token == "12-3"
    for bad in ("", "12", "a-b", "-1-2", f"{2**63}-1", "1-2-3"):
        with pytest.raises(ValueError, match="event id"):
            EventPosition.parse(bad)


def test_the_log_is_purged_by_age(db: Engine) -> None:
    owner = make_owner(db)
    box.ask(db, make_agent(db, owner))
    with db.begin() as conn:
        conn.execute(text("UPDATE owner_events SET created_at = now() - interval '25 hours'"))
    with Session(db) as session, session.begin():
        assert events.purge_older_than(session, owner_events.RETENTION) == 1


def test_an_api_process_forgets_old_events_and_expired_keys(db: Engine, database_url: str) -> None:
    owner = make_owner(db)
    box.ask(db, make_agent(db, owner))
    with db.begin() as conn:
        conn.execute(text("UPDATE owner_events SET created_at = now() - interval '25 hours'"))
        conn.execute(
            text(
                "INSERT INTO api_idempotency_keys (user_key, key, fingerprint, created_at)"
                " VALUES (:o, 'old', 'f', now() - interval '25 hours'),"
                " (:o, 'fresh', 'f', now())"
            ),
            {"o": owner},
        )

    def left() -> tuple[int, list[str]]:
        with db.connect() as conn:
            events_left = conn.execute(text("SELECT count(*) FROM owner_events")).scalar_one()
            keys = conn.execute(text("SELECT key FROM api_idempotency_keys")).scalars().all()
        return events_left, list(keys)

    database = Database(database_url)
    loop = asyncio.new_event_loop()
    task = loop.create_task(forget_old_rows(database))

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: left() == (0, ["fresh"]), 10, what="the old rows to go")
    finally:
        loop.call_soon_threadsafe(task.cancel)
        runner.join(10)
        loop.close()
        database.dispose()
