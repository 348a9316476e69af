"""Each component's login may do what it needs and nothing else (issue 24).

The table below runs every statement as the login it names, on the real database: a run
pod's login for run A (its secret in the session, as its Job gives it), the operator's
and the API's. Each is refused (an error) or finds nothing (no row seen or changed);
either way the stored data is the same before and after, byte for byte.
"""

from __future__ import annotations

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
from achilles.db.run_claim import HeartbeatAlone, claim_run_alone, runner_conninfo
from achilles.domain.run_secret import RunSecret, session_settings
from achilles.domain.runs import RunTrigger
from achilles.errors import ConfigurationError, InvalidInputError
from achilles.services import db_roles
from tests.db.factories import make_agent
from tests.db.ks_fixtures import load_demo_knowledge
from tests.db.logins import PASSWORD, admin, login_url, run_pod

DENIED = "denied"  # the statement fails: insufficient privilege (SQLSTATE 42501)
INSUFFICIENT_PRIVILEGE = "42501"
NOTHING = "nothing"  # it runs, and sees or changes no row

# Tables whose rows are compared before and after each statement (as the superuser).
WATCHED = (
    "agent_runs",
    "agents",
    "users",
    "platform_settings",
    "agent_inbox_items",
    "agent_inbox_boards",
    "deleted_agent_tokens",
    "ks_documents",
    "api_idempotency_keys",
)


@dataclass(frozen=True)
class World:
    run_a: int
    run_b: int
    agent_a: int
    agent_b: int
    secret_a: str
    secret_b: str


@pytest.fixture
def world(db: Engine) -> World:
    """alice's agent A and bob's agent B, one queued run each with its Job's secret; a
    Knowledge Store where bob has a document alice may not read; an item on B's board."""
    load_demo_knowledge(db)
    agent_a, agent_b = make_agent(db, "alice"), make_agent(db, "bob")
    secrets = {}
    with Session(db) as session, session.begin():
        for agent in (agent_a, agent_b):
            run_id = journal.enqueue_run(session, agent, RunTrigger.MANUAL).run_id
            secrets[run_id] = RunSecret.new()
            session.execute(
                text("UPDATE agent_runs SET runner_secret_hash = :h WHERE id = :id"),
                {"h": secrets[run_id].digest, "id": run_id},
            )
        board.ask(session, agent_b, "b-question", "May I?")
    (run_a, a), (run_b, b) = secrets.items()
    return World(run_a, run_b, agent_a, agent_b, a.value, b.value)


def _snapshot(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {
            table: conn.execute(
                text(
                    f"SELECT coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '')"
                    f" FROM {table} t"
                )
            ).scalar_one()
            for table in WATCHED
        }


@pytest.fixture
def runner_a(database_url: str, world: World) -> Iterator[Engine]:
    """Run A's pod: the runner's login, run A's id and secret in every session; claimed."""
    database = run_pod(database_url, world.run_a, world.secret_a)
    with database.transaction() as session:
        assert journal.claim_run(session, world.run_a)
        assert journal.add_tokens(session, world.run_a, 100)
    yield database.engine
    database.dispose()


def _engine_of(database_url: str, component: Component) -> Iterator[Engine]:
    database = Database(login_url(database_url, component), pool_size=1)
    yield database.engine
    database.dispose()


@pytest.fixture
def operator(database_url: str, world: World) -> Iterator[Engine]:
    yield from _engine_of(database_url, Component.OPERATOR)


@pytest.fixture
def api(database_url: str, world: World) -> Iterator[Engine]:
    yield from _engine_of(database_url, Component.API)


def _attempt(engine: Engine, statements: list[str], world: World) -> str:
    """DENIED if a statement is refused, else NOTHING if the last one saw or changed no row
    (else what it returned: the test fails on it)."""
    params = {
        "run_a": world.run_a,
        "run_b": world.run_b,
        "agent_a": world.agent_a,
        "agent_b": world.agent_b,
    }
    with engine.connect() as conn:
        try:
            with conn.begin():
                result = None
                for statement in statements:
                    result = conn.execute(text(statement), params)
                assert result is not None
                if result.returns_rows:
                    rows = result.all()
                    return NOTHING if not rows else f"rows {rows}"
                return NOTHING if result.rowcount == 0 else f"{result.rowcount} rows changed"
        except DBAPIError as exc:
            sqlstate = getattr(exc.orig, "sqlstate", None)
            return DENIED if sqlstate == INSUFFICIENT_PRIVILEGE else f"failed: {exc.orig}"


RUNNER_CASES = {
    "another run's heartbeat": ["UPDATE agent_runs SET heartbeat_at = now() WHERE id = :run_b"],
    "another run's tokens": [
        "UPDATE agent_runs SET tokens_used = tokens_used + 1000 WHERE id = :run_b"
    ],
    "finishing another run": [
        "UPDATE agent_runs SET state = 'failed', reason = 'error', error = 'x',"
        " started_at = now(), finished_at = now() WHERE id = :run_b"
    ],
    "claiming another run": ["SELECT achilles_claim_run(:run_b)"],
    "reading another run": ["SELECT id, output FROM agent_runs WHERE id = :run_b"],
    "reading another agent": ["SELECT prompt FROM agents WHERE id = :agent_b"],
    "reading another owner": ["SELECT key FROM users WHERE key <> 'alice'"],
    "editing its own agent": ["UPDATE agents SET prompt = 'x' WHERE id = :agent_a"],
    "a new owner": ["INSERT INTO users (key) VALUES ('mallory')"],
    "deactivating its owner": ["UPDATE users SET active = false"],
    "deleting its run": ["DELETE FROM agent_runs WHERE id = :run_a"],
    "moving its run to another agent": [
        "UPDATE agent_runs SET agent_id = :agent_b WHERE id = :run_a"
    ],
    "giving its tokens back": ["UPDATE agent_runs SET tokens_used = 0 WHERE id = :run_a"],
    "queueing its run again": [
        "UPDATE agent_runs SET state = 'queued', started_at = NULL WHERE id = :run_a"
    ],
    "an outcome while running": ["UPDATE agent_runs SET output = 'x' WHERE id = :run_a"],
    "moving its start": [
        "UPDATE agent_runs SET started_at = now() - interval '1 day' WHERE id = :run_a"
    ],
    "its secret's hash": ["UPDATE agent_runs SET runner_secret_hash = NULL WHERE id = :run_a"],
    "a run of its own making": [
        "INSERT INTO agent_runs (agent_id, trigger, state) VALUES (:agent_a, 'manual', 'queued')"
    ],
    "the budget": ["UPDATE platform_settings SET agent_weekly_token_budget = 1000000000"],
    "deleted agents' tokens": ["DELETE FROM deleted_agent_tokens"],
    "reading the event log": ["SELECT * FROM owner_events"],
    "reading reply history": ["SELECT * FROM agent_inbox_item_revisions"],
    "reading idempotency keys": ["SELECT * FROM api_idempotency_keys"],
    "another agent's inbox": ["SELECT question FROM agent_inbox_items WHERE agent_id = :agent_b"],
    "asking on another agent's board": [
        "INSERT INTO agent_inbox_items (agent_id, key, question, state)"
        " VALUES (:agent_b, 'evil', 'give me', 'blocked')"
    ],
    "moving another agent's item": [
        "UPDATE agent_inbox_items SET state = 'done' WHERE agent_id = :agent_b"
    ],
    "a table": ["CREATE TABLE evil (x int)"],
    "a function": ["CREATE FUNCTION evil() RETURNS int LANGUAGE sql AS 'SELECT 1'"],
    "dropping the journal": ["DROP TABLE agent_runs"],
    "switching row-level security off": ["ALTER TABLE agent_runs DISABLE ROW LEVEL SECURITY"],
    "dropping a policy": ["DROP POLICY agent_runs_runner ON agent_runs"],
    "emptying the journal": ["TRUNCATE agent_runs"],
    "a role": ["CREATE ROLE evil LOGIN"],
    "the server's files": ["SELECT pg_read_file('postgresql.conf')"],
    "SET ROLE to the superuser": ["SET ROLE postgres"],
    "SET ROLE to the operator": ["SET ROLE achilles_operator"],
    "SET ROLE to the API": ["SET ROLE achilles_api"],
    "RESET ROLE, then another run": [
        "RESET ROLE",
        "SELECT id FROM agent_runs WHERE id = :run_b",
    ],
    "SET SESSION AUTHORIZATION": ["SET SESSION AUTHORIZATION postgres"],
    "set_config of another run id": [
        "SELECT set_config('achilles.run_id', CAST(:run_b AS text), false)",
        "SELECT id FROM agent_runs",
    ],
    "set_config of a guessed secret": [
        "SELECT set_config('achilles.run_secret', 'guess', false)",
        "SELECT id FROM agent_runs",
    ],
    "set_config of another owner for the Knowledge Store": [
        "SET ROLE achilles_ks_reader",
        "SELECT set_config('achilles.ks_user_id', '2', false)",  # bob (the fixture's second)
        "SELECT key FROM ks_documents WHERE key = 'bob-secret'",
    ],
    "the Knowledge Store's loader mode": [
        "SELECT set_config('achilles.ks_maintenance', 'on', false)",
        "SELECT key FROM ks_documents WHERE key = 'bob-secret'",
    ],
    "writing the Knowledge Store": [
        "SELECT set_config('achilles.ks_maintenance', 'on', false)",
        "UPDATE ks_documents SET body = 'x'",
    ],
}


@pytest.mark.parametrize("statements", RUNNER_CASES.values(), ids=RUNNER_CASES.keys())
def test_a_run_pod_reaches_only_its_own_run(
    db: Engine, world: World, runner_a: Engine, statements: list[str]
) -> None:
    before = _snapshot(db)
    assert _attempt(runner_a, statements, world) in (DENIED, NOTHING)
    assert _snapshot(db) == before


def test_a_run_pod_sees_its_run_its_agent_its_owner_and_their_documents(
    world: World, runner_a: Engine
) -> None:
    with runner_a.connect() as conn:
        assert conn.execute(text("SELECT id FROM agent_runs")).scalars().all() == [world.run_a]
        assert conn.execute(text("SELECT id FROM agents")).scalars().all() == [world.agent_a]
        assert conn.execute(text("SELECT key FROM users")).scalars().all() == ["alice"]
        assert conn.execute(text("SELECT count(*) FROM agent_models")).scalar_one() == 1
        documents = conn.execute(text("SELECT key FROM ks_documents ORDER BY key")).scalars()
        assert documents.all() == ["alice-notes", "eng-handbook"]


def test_once_its_run_ended_a_run_pod_sees_and_writes_nothing(
    db: Engine, world: World, runner_a: Engine
) -> None:
    with runner_a.begin() as conn:
        assert journal.succeed_run(Session(bind=conn), world.run_a, "done")
    before = _snapshot(db)
    for statement in (
        "UPDATE agent_runs SET heartbeat_at = now() WHERE id = :run_a",
        "SELECT id FROM agents",
        "SELECT key FROM ks_documents",
        "SELECT id FROM agent_inbox_items",
    ):
        assert _attempt(runner_a, [statement], world) == NOTHING, statement
    assert _snapshot(db) == before


def test_a_run_pod_claims_and_beats_with_psycopg_alone_its_own_run_only(
    db: Engine, database_url: str, world: World
) -> None:
    def conninfo(run_id: int, secret: str) -> str:
        return runner_conninfo(
            login_url(database_url, Component.RUNNER),
            session_settings=session_settings(run_id, secret),
            application_name="test-runner",
            connect_timeout=5,
        )

    own = conninfo(world.run_a, world.secret_a)
    assert claim_run_alone(own, world.run_a)
    assert not claim_run_alone(own, world.run_a)  # claimed already
    with db.connect() as conn:
        conn.execute(
            text("UPDATE agent_runs SET heartbeat_at = now() - interval '1 hour' WHERE id = :id"),
            {"id": world.run_a},
        )
        conn.commit()
    beat = HeartbeatAlone(own, world.run_a)
    assert beat.beat()
    with db.connect() as conn:
        age = conn.execute(
            text(
                "SELECT now() - heartbeat_at < interval '1 minute' FROM agent_runs WHERE id = :id"
            ),
            {"id": world.run_a},
        ).scalar_one()
    assert age is True
    # Another run's id with this pod's secret: its row is not this login's to see.
    assert not HeartbeatAlone(own, world.run_b).beat()
    with db.connect() as conn:
        conn.execute(
            text(
                "UPDATE agent_runs SET state = 'failed', reason = 'stale', finished_at = now()"
                " WHERE id = :id"
            ),
            {"id": world.run_a},
        )
        conn.commit()
    assert not beat.beat()  # reaped: the beater is told, and writes nothing
    beat.close()


def test_a_run_pod_cannot_read_another_pods_secret(
    database_url: str, world: World, runner_a: Engine
) -> None:
    """Both pods share one login: what one sent must not show in the other's view of
    pg_stat_activity (the secret is a startup option, never a statement)."""
    other = run_pod(database_url, world.run_b, world.secret_b)
    try:
        with other.engine.connect() as conn:
            # Left idle in its transaction: the claim stays B's last statement.
            conn.execute(text("SELECT achilles_claim_run(:id)"), {"id": world.run_b})
            with runner_a.connect() as spy:
                seen = spy.execute(
                    text("SELECT coalesce(string_agg(query, ' '), '') FROM pg_stat_activity")
                ).scalar_one()
                assert "achilles_claim_run" in seen  # B's session is in A's view
                assert world.secret_b not in seen
    finally:
        other.dispose()


OPERATOR_CASES = {
    "a table": ["CREATE TABLE evil (x int)"],
    "dropping an agent table": ["DROP TABLE agents"],
    "switching row-level security off": ["ALTER TABLE agent_runs DISABLE ROW LEVEL SECURITY"],
    "reading the Knowledge Store": ["SELECT key FROM ks_documents"],
    "rewriting deleted agents' tokens": ["UPDATE deleted_agent_tokens SET tokens_used = 0"],
    "deleting deleted agents' tokens": ["DELETE FROM deleted_agent_tokens"],
    "claiming a run as a runner": ["SELECT achilles_claim_run(:run_a)"],
    "reading idempotency keys": ["SELECT * FROM api_idempotency_keys"],
    "SET ROLE to the superuser": ["SET ROLE postgres"],
    "SET ROLE to the runner": ["SET ROLE achilles_runner"],
    "a role": ["CREATE ROLE evil LOGIN"],
}

API_CASES = {
    "finishing a run": ["UPDATE agent_runs SET state = 'failed' WHERE id = :run_a"],
    "a run": [
        "INSERT INTO agent_runs (agent_id, trigger, state) VALUES (:agent_a, 'manual', 'queued')"
    ],
    "deleting an agent": ["DELETE FROM agents WHERE id = :agent_a"],
    "editing an agent": ["UPDATE agents SET prompt = 'x'"],
    "deactivating an owner": ["UPDATE users SET active = false"],
    "the budget": ["UPDATE platform_settings SET agent_weekly_token_budget = 1"],
    "reading the Knowledge Store": ["SELECT key FROM ks_documents"],
    "a table": ["CREATE TABLE evil (x int)"],
    "emptying the journal": ["TRUNCATE agent_runs"],
    "claiming a run as a runner": ["SELECT achilles_claim_run(:run_a)"],
    # People reply to items; only a run's agent asks (issue 37).
    "asking in an agent's inbox": [
        "INSERT INTO agent_inbox_items (agent_id, key, state, question)"
        " VALUES (:agent_a, 'k', 'blocked', 'q')"
    ],
    "making an inbox board": ["INSERT INTO agent_inbox_boards (agent_id) VALUES (:agent_a)"],
    "SET ROLE to the operator": ["SET ROLE achilles_operator"],
    "SET ROLE to the runner": ["SET ROLE achilles_runner"],
}


@pytest.mark.parametrize("statements", OPERATOR_CASES.values(), ids=OPERATOR_CASES.keys())
def test_the_operator_login_is_refused(
    db: Engine, world: World, operator: Engine, statements: list[str]
) -> None:
    before = _snapshot(db)
    assert _attempt(operator, statements, world) == DENIED
    assert _snapshot(db) == before


@pytest.mark.parametrize("statements", API_CASES.values(), ids=API_CASES.keys())
def test_the_api_login_is_refused(
    db: Engine, world: World, api: Engine, statements: list[str]
) -> None:
    before = _snapshot(db)
    assert _attempt(api, statements, world) == DENIED
    assert _snapshot(db) == before


def test_the_operator_and_the_api_see_every_owners_runs(
    world: World, operator: Engine, api: Engine
) -> None:
    for engine in (operator, api):
        with engine.connect() as conn:
            runs = conn.execute(text("SELECT id FROM agent_runs ORDER BY id")).scalars().all()
            assert runs == [world.run_a, world.run_b]


def _login_facts(conn: Connection, name: str) -> tuple[bool, bool, list[str]]:
    row = conn.execute(
        text(
            "SELECT r.rolsuper, r.rolcanlogin, ARRAY(SELECT g.rolname FROM pg_auth_members m"
            " JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid)"
            " FROM pg_roles r WHERE r.rolname = :name"
        ),
        {"name": name},
    ).one()
    return row[0], row[1], sorted(row[2])


def test_db_login_makes_a_member_of_one_component_only(db: Engine, database_url: str) -> None:
    database = admin(database_url)
    first = db_roles.grant_login(database, Component.API, "achilles_test_portal", PASSWORD)
    again = db_roles.grant_login(database, Component.API, "achilles_test_portal", PASSWORD * 2)
    assert (first.created, again.created) == (True, False)
    with db.connect() as conn:
        assert _login_facts(conn, "achilles_test_portal") == (False, True, ["achilles_api"])
    refused = {
        "postgres": "is a superuser",
        "achilles_runner": "group role",
        "achilles_test_portal": "already a member of achilles_api",
        "Robert'); DROP TABLE agents;--": "not a plain role name",
    }
    for name, message in refused.items():
        with pytest.raises(InvalidInputError, match=message):
            db_roles.grant_login(database, Component.RUNNER, name, PASSWORD)
    with pytest.raises(InvalidInputError, match="at least 16"):
        db_roles.grant_login(database, Component.RUNNER, "achilles_test_short", "short")


def test_a_login_may_not_make_logins(database_url: str) -> None:
    operator_db = Database(login_url(database_url, Component.OPERATOR), pool_size=1)
    try:
        with pytest.raises(InvalidInputError, match="may not manage roles"):
            db_roles.grant_login(operator_db, Component.RUNNER, "achilles_test_sneaky", PASSWORD)
    finally:
        operator_db.dispose()


def test_the_operator_refuses_a_superuser_or_owner_login_unless_allowed(
    db: Engine, database_url: str
) -> None:
    with pytest.raises(ConfigurationError, match=r"is a superuser.*ACHILLES_ALLOW_SUPERUSER"):
        db_roles.refuse_powerful_login(admin(database_url), Component.OPERATOR, allow=False)
    db_roles.refuse_powerful_login(admin(database_url), Component.OPERATOR, allow=True)
    operator_db = Database(login_url(database_url, Component.OPERATOR), pool_size=1)
    try:
        db_roles.refuse_powerful_login(operator_db, Component.OPERATOR, allow=False)
        with db.begin() as conn:  # the operator's login made an owner of a table
            conn.execute(text("CREATE TABLE owned_by_the_operator (x int)"))
            conn.execute(text("ALTER TABLE owned_by_the_operator OWNER TO achilles_test_operator"))
        with pytest.raises(ConfigurationError, match="owns 1 of the schema's tables"):
            db_roles.refuse_powerful_login(operator_db, Component.OPERATOR, allow=False)
    finally:
        operator_db.dispose()
        with db.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS owned_by_the_operator"))
