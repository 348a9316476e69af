"""An owner's deactivation NOTIFYs `achilles_owners` (migration 0015), and nothing else
does: heard on a real LISTEN connection, whichever login that may update `users` writes.

Each case ends with a marker NOTIFY sent after its writes committed: PostgreSQL delivers
notifications in commit order, so whatever the writes caused has arrived by the time the
marker does, and no case waits out a timeout to prove a silence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from achilles.db import migrate
from achilles.db.database import Database
from achilles.db.notifications import OWNERS_CHANNEL, libpq_dsn
from achilles.db.roles import GROUP_ROLES, Component
from achilles.services import users
from tests.db.factories import make_owner
from tests.db.logins import login_url

MARKER = "end-of-the-case"
HEARD_WITHIN = 30.0  # seconds for the marker to come back; it comes in milliseconds


@pytest.fixture
def listening(db: Engine, database_url: str) -> Iterator[psycopg.Connection]:
    """A session LISTENing on the owners' channel, as the operator's listener does."""
    with psycopg.connect(libpq_dsn(make_url(database_url)), autocommit=True) as conn:
        conn.execute(f"LISTEN {OWNERS_CHANNEL}")
        yield conn


@pytest.fixture
def operator_db(db: Engine, database_url: str) -> Iterator[Database]:
    database = Database(login_url(database_url, Component.OPERATOR), pool_size=1)
    yield database
    database.dispose()


def heard(listening: psycopg.Connection, db: Engine) -> list[str]:
    """The payloads heard on the channel since the last call, up to a marker sent now."""
    with db.begin() as conn:
        conn.execute(
            text("SELECT pg_notify(:channel, :marker)"),
            {"channel": OWNERS_CHANNEL, "marker": MARKER},
        )
    payloads: list[str] = []
    for note in listening.notifies(timeout=HEARD_WITHIN):
        if note.payload == MARKER:
            return payloads
        payloads.append(note.payload)
    raise AssertionError(f"the marker NOTIFY did not come back within {HEARD_WITHIN} s")


def _update(engine: Engine, statement: str, **params: object) -> None:
    with engine.begin() as conn:
        conn.execute(text(statement), params)


def _set_active(engine: Engine, key: str, active: bool) -> None:
    _update(engine, "UPDATE users SET active = :active WHERE key = :key", key=key, active=active)


def test_a_deactivation_by_the_operators_login_notifies_once(
    db: Engine, listening: psycopg.Connection, operator_db: Database
) -> None:
    owner = make_owner(db)
    assert heard(listening, db) == []  # the user's insert (active) says nothing
    _set_active(operator_db.engine, owner, False)
    assert heard(listening, db) == [""]


def test_a_deactivation_by_the_tables_owner_notifies(
    db: Engine, listening: psycopg.Connection
) -> None:
    """Whoever owns `users` (here the migrations' login) flips the flag with a plain
    UPDATE, as an Auth service would."""
    owner = make_owner(db)
    _set_active(db, owner, False)
    assert heard(listening, db) == [""]


def test_the_cli_upsert_inactive_notifies(
    db: Engine, listening: psycopg.Connection, operator_db: Database
) -> None:
    """`achilles users upsert --inactive`: INSERT ... ON CONFLICT DO UPDATE, whose update
    fires the UPDATE trigger."""
    owner = make_owner(db)
    done = users.upsert_user(operator_db, owner, timezone=None, active=False)
    assert done.changed
    assert not done.created
    assert heard(listening, db) == [""]


def test_many_owners_deactivated_in_one_transaction_notify_once(
    db: Engine, listening: psycopg.Connection
) -> None:
    owners = [make_owner(db) for _ in range(3)]
    _update(db, "UPDATE users SET active = false WHERE key = ANY(:keys)", keys=owners)
    assert heard(listening, db) == [""]


def _rolled_back_deactivation(db: Engine, key: str) -> None:
    with db.connect() as conn, conn.begin() as transaction:
        conn.execute(text("UPDATE users SET active = false WHERE key = :key"), {"key": key})
        transaction.rollback()


# case -> (the owner is active before it, the write)
NOT_A_DEACTIVATION: dict[str, tuple[bool, Callable[[Engine, str], None]]] = {
    "reactivated": (False, lambda db, key: _set_active(db, key, True)),
    "deactivated again": (False, lambda db, key: _set_active(db, key, False)),
    "another column": (
        True,
        lambda db, key: _update(
            db, "UPDATE users SET timezone = 'Europe/Paris' WHERE key = :key", key=key
        ),
    ),
    "active written unchanged": (
        True,
        lambda db, key: _update(db, "UPDATE users SET active = active WHERE key = :key", key=key),
    ),
    "inserted inactive": (
        True,
        lambda db, key: _update(
            db, "INSERT INTO users (key, active) VALUES (:key || 'x', false)", key=key
        ),
    ),
    "rolled back": (True, _rolled_back_deactivation),
}


@pytest.mark.parametrize("case", sorted(NOT_A_DEACTIVATION))
def test_nothing_but_a_deactivation_notifies(
    db: Engine, listening: psycopg.Connection, case: str
) -> None:
    active_before, write = NOT_A_DEACTIVATION[case]
    owner = make_owner(db)
    if not active_before:
        _set_active(db, owner, False)
        assert heard(listening, db) == [""]
    write(db, owner)
    assert heard(listening, db) == []


def test_every_component_that_may_update_users_is_one_the_trigger_was_proven_for(
    db_engine: Engine,
) -> None:
    """The trigger runs as whoever updates the row and needs only `pg_notify` (every
    role's): the operator's login fires it above; the API and the runners may not
    update `users` at all. A grant to another group must come with its own case here."""
    with db_engine.connect() as conn:
        may_update = {
            role
            for role in GROUP_ROLES.values()
            if conn.execute(
                text("SELECT has_table_privilege(:role, 'users', 'UPDATE')"), {"role": role}
            ).scalar_one()
        }
    assert may_update == {GROUP_ROLES[Component.OPERATOR]}


def _trigger_and_function(engine: Engine) -> tuple[bool, bool]:
    with engine.connect() as conn:
        trigger = conn.execute(
            text("SELECT count(*) FROM pg_trigger WHERE tgname = 'users_notify_deactivated'")
        ).scalar_one()
        function = conn.execute(
            text("SELECT count(*) FROM pg_proc WHERE proname = 'achilles_notify_owner_deactivated'")
        ).scalar_one()
    return bool(trigger), bool(function)


def test_the_migration_goes_down_and_up_again(scratch_engine: Engine) -> None:
    migrate.upgrade(scratch_engine)
    assert _trigger_and_function(scratch_engine) == (True, True)
    migrate.downgrade(scratch_engine, "0014_notifications")
    assert _trigger_and_function(scratch_engine) == (False, False)
    migrate.upgrade(scratch_engine)
    assert _trigger_and_function(scratch_engine) == (True, True)
