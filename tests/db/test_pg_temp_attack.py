"""A runner's session cannot shadow the journal with temporary tables (issue 37, item 1).

The runner's login is shared by every run pod: what keeps one pod to its run is the
database's functions (`achilles_run_id()` and the ones built on it), which run as the
schema's owner. PostgreSQL searches the session's temporary schema first for tables
unless a function's `search_path` names `pg_temp` (the documentation's "Writing SECURITY
DEFINER Functions Safely"): with `pg_catalog, <schema>` a session that made a temporary
`agent_runs` decided which run those functions saw. Two fences, each tested alone here:
no login of the product may make temporary tables (migration 0016 revokes TEMPORARY
from PUBLIC), and every function of the schema pins a search path with `pg_temp` last,
so a session that was given TEMPORARY anyway still cannot shadow a table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.inbox import board
from achilles.db.journal import runs as journal
from achilles.db.roles import Component
from achilles.domain.run_secret import RunSecret
from achilles.domain.runs import RunTrigger
from tests.db.factories import make_agent
from tests.db.ks_fixtures import load_demo_knowledge
from tests.db.logins import login_url

INSUFFICIENT_PRIVILEGE = "42501"
# What the attacking session claims to hold: a secret of its own choosing.
FORGED_SECRET = "forged"
BOBS_PROMPT = "Bob's private prompt: the reorganisation list."
BOBS_OUTPUT = "Bob's private output: the salary figures."


@dataclass(frozen=True)
class Victim:
    run: int
    agent: int


@pytest.fixture
def victim(db: Engine) -> Victim:
    """bob's agent with a running run that wrote an output so far, an item on its board,
    and a Knowledge Store where bob has a document nobody else may read."""
    load_demo_knowledge(db)
    make_agent(db, "alice")
    agent = make_agent(db, "bob", prompt=BOBS_PROMPT)
    with Session(db) as session, session.begin():
        run = journal.enqueue_run(session, agent, RunTrigger.MANUAL).run_id
        session.execute(
            text(
                "UPDATE agent_runs SET runner_secret_hash = :h, state = 'running',"
                " started_at = now(), heartbeat_at = now(), output = :output WHERE id = :id"
            ),
            {"h": RunSecret.new().digest, "id": run, "output": BOBS_OUTPUT},
        )
        board.ask(session, agent, "b-question", "May I?")
    return Victim(run=run, agent=agent)


@pytest.fixture
def runner_login(database_url: str) -> Iterator[Engine]:
    """The shared runner login with no run in its session: what anyone holding the
    runner's database Secret (any run pod, any reader of that Secret) can open."""
    database = Database(login_url(database_url, Component.RUNNER), pool_size=1)
    yield database.engine
    database.dispose()


@pytest.fixture
def runner_login_given_temp(database_url: str, db: Engine) -> Iterator[Engine]:
    """The runner login as if an administrator had granted it TEMPORARY: the second fence
    (the functions' search path) must hold alone."""
    url = login_url(database_url, Component.RUNNER)
    login = f"achilles_test_{Component.RUNNER}"
    with db.begin() as conn:
        database = conn.execute(text("SELECT current_database()")).scalar_one()
        conn.execute(text(f'GRANT TEMPORARY ON DATABASE "{database}" TO {login}'))
    handle = Database(url, pool_size=1)
    try:
        yield handle.engine
    finally:
        handle.dispose()
        with db.begin() as conn:
            conn.execute(text(f'REVOKE TEMPORARY ON DATABASE "{database}" FROM {login}'))


def _schema(conn: Connection) -> str:
    return str(conn.execute(text("SELECT current_schema()")).scalar_one())


def _shadow_the_journal(conn: Connection, victim: Victim) -> None:
    """The attack: temporary `agent_runs` and `pg_roles` that name the victim's run as
    this session's and say this session is a superuser (so no runner)."""
    conn.execute(
        text(
            "CREATE TEMPORARY TABLE agent_runs"
            " (id bigint, agent_id bigint, state text, runner_secret_hash bytea)"
        )
    )
    conn.execute(
        text("INSERT INTO pg_temp.agent_runs VALUES (:run, :agent, 'running', :hash)"),
        {
            "run": victim.run,
            "agent": victim.agent,
            "hash": hashlib.sha256(FORGED_SECRET.encode()).digest(),
        },
    )
    conn.execute(text("CREATE TEMPORARY TABLE pg_roles (rolname name, rolsuper boolean)"))
    conn.execute(text("INSERT INTO pg_temp.pg_roles VALUES (session_user, true)"))
    conn.execute(text(f"SET achilles.run_id = '{victim.run}'"))
    conn.execute(text(f"SET achilles.run_secret = '{FORGED_SECRET}'"))


def test_a_runner_login_may_not_make_temporary_tables(victim: Victim, runner_login: Engine) -> None:
    with runner_login.connect() as conn, pytest.raises(DBAPIError) as refused:
        _shadow_the_journal(conn, victim)
    assert getattr(refused.value.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE


def test_no_login_of_the_product_holds_temporary(db: Engine) -> None:
    """PUBLIC holds no TEMPORARY on the database, so no group role or login inherits it."""
    with db.connect() as conn:
        holders = conn.execute(
            text(
                "SELECT r.rolname FROM pg_roles r"
                " WHERE r.rolname IN ('achilles_operator', 'achilles_api', 'achilles_runner')"
                "    OR r.rolname LIKE 'achilles_test_%'"
            )
        ).scalars()
        allowed = {
            name: conn.execute(
                text("SELECT has_database_privilege(:name, current_database(), 'TEMPORARY')"),
                {"name": name},
            ).scalar_one()
            for name in holders
        }
    assert allowed
    assert not any(allowed.values()), allowed


def test_a_runner_given_temporary_still_reaches_nothing_of_another_run(
    victim: Victim, runner_login_given_temp: Engine
) -> None:
    with runner_login_given_temp.connect() as conn:
        schema = _schema(conn)
        _shadow_the_journal(conn, victim)
        seen: dict[str, list[object]] = {
            what: list(conn.execute(text(f"SELECT {column} FROM {schema}.{table}")).scalars())
            for what, column, table in (
                ("run", "output", "agent_runs"),
                ("agent", "prompt", "agents"),
                ("owner", "key", "users"),
                ("inbox", "key", "agent_inbox_items"),
                ("documents", "key", "ks_documents"),
            )
        }
        # The runner's rules still hold this session (it is a runner, whatever its
        # temporary pg_roles says).
        is_runner = conn.execute(text(f"SELECT {schema}.achilles_session_is_runner()"))
        seen["is a runner"] = [is_runner.scalar_one()]
        conn.rollback()
    assert seen == {
        "run": [],
        "agent": [],
        "owner": [],
        "inbox": [],
        "documents": [],
        "is a runner": [True],
    }


def test_a_runner_given_temporary_cannot_claim_another_run(
    db: Engine, victim: Victim, runner_login_given_temp: Engine
) -> None:
    with db.begin() as conn:
        conn.execute(
            text(
                "UPDATE agent_runs SET state = 'queued', started_at = NULL,"
                " heartbeat_at = NULL WHERE id = :id"
            ),
            {"id": victim.run},
        )
    with runner_login_given_temp.connect() as conn:
        schema = _schema(conn)
        _shadow_the_journal(conn, victim)
        with pytest.raises(DBAPIError) as refused:
            conn.execute(text(f"SELECT {schema}.achilles_claim_run(:run)"), {"run": victim.run})
        assert getattr(refused.value.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE
    with db.connect() as conn:
        state = conn.execute(
            text("SELECT state FROM agent_runs WHERE id = :id"), {"id": victim.run}
        ).scalar_one()
    assert state == "queued"


def test_every_function_of_the_schema_pins_a_search_path_with_pg_temp_last(
    db_engine: Engine,
) -> None:
    """Read from pg_proc: each function the migrations made (not an extension's) sets
    `search_path` to trusted schemas only (pg_catalog, the schema) with `pg_temp` last.
    A SECURITY DEFINER function without it runs a caller's temporary tables as the
    schema's owner; an invoker function without it (a policy's, a trigger's WHEN) lets
    the caller's session decide what the rule reads."""
    with db_engine.connect() as conn:
        schema = _schema(conn)
        rows = conn.execute(
            text(
                """
                SELECT p.proname, p.prosecdef,
                       (SELECT substr(c, length('search_path=') + 1)
                        FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%') AS path
                FROM pg_proc p
                WHERE p.pronamespace = current_schema()::regnamespace
                  AND NOT EXISTS (
                      SELECT FROM pg_depend d
                      WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                        AND d.deptype = 'e')
                ORDER BY p.proname
                """
            )
        ).all()
    assert any(row.prosecdef for row in rows)
    trusted = {"pg_catalog", schema, f'"{schema}"'}
    unsafe = {}
    for name, definer, path in rows:
        entries = [entry.strip() for entry in (path or "").split(",") if entry.strip()]
        if not entries or entries[-1] != "pg_temp" or not set(entries[:-1]) <= trusted:
            unsafe[name] = (definer, path)
    assert unsafe == {}
