"""The dev stack migrates as a schema owner that is no superuser, as the chart does
(issue 37): `achilles_dev.logins.ensure_schema_owner`, on the real server.

With the migrations run as `postgres`, every SECURITY DEFINER function of the schema ran
as a superuser in `make dev`: a hole in one of them was a hole to everything. Here the
owner is a plain LOGIN CREATEROLE role; it migrates a fresh database, takes over one an
older stack migrated as the superuser, and the components' logins are made by it.
"""

from __future__ import annotations

from sqlalchemy import Engine, text

from achilles.db import migrate
from achilles.db.database import Database
from achilles.db.roles import GROUP_ROLES, Component
from achilles_dev.logins import ensure_schema_owner, grant_component_logins

OWNER = "achilles_test_schema_owner"
PASSWORD = "an-owner-of-the-tests"

# What in the schema a superuser owns, or anyone but the owner (functions, relations,
# text search configurations); and whether the owner is a superuser.
_OWNERS = """
SELECT kind, name, owner FROM (
    SELECT 'function' AS kind, p.proname::text AS name, p.proowner AS owner_oid
    FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
    UNION ALL
    SELECT 'relation', c.relname::text, c.relowner FROM pg_class c
    WHERE c.relnamespace = current_schema()::regnamespace
    UNION ALL
    SELECT 'text search', t.cfgname::text, t.cfgowner FROM pg_ts_config t
    WHERE t.cfgnamespace = current_schema()::regnamespace
) o JOIN LATERAL (SELECT rolname AS owner FROM pg_roles WHERE oid = o.owner_oid) r ON true
WHERE owner <> :owner
"""


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def _not_owned(url: str) -> list[tuple[str, str, str]]:
    engine = Database(url, pool_size=1).engine
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(_OWNERS), {"owner": OWNER})]
    finally:
        engine.dispose()


def _facts(owner_url: str) -> dict[str, object]:
    engine = Database(owner_url, pool_size=1).engine
    try:
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT r.rolsuper, r.rolcreaterole, r.rolbypassrls,"
                    " (SELECT pg_get_userbyid(datdba) FROM pg_database"
                    "  WHERE datname = current_database()) AS database_owner,"
                    " has_database_privilege('public', current_database(), 'TEMPORARY')"
                    "  AS public_temporary,"
                    " (SELECT bool_or(o.rolsuper) FROM pg_proc p"
                    "  JOIN pg_roles o ON o.oid = p.proowner"
                    "  WHERE p.prosecdef AND p.pronamespace = current_schema()::regnamespace)"
                    "  AS a_definer_runs_as_superuser"
                    " FROM pg_roles r WHERE r.rolname = session_user"
                )
            ).one()
            return dict(row._mapping)
    finally:
        engine.dispose()


EXPECTED_FACTS = {
    "rolsuper": False,
    "rolcreaterole": True,
    "rolbypassrls": False,
    "database_owner": OWNER,
    "public_temporary": False,
    "a_definer_runs_as_superuser": False,
}


def _migrated_by_owner(scratch_engine: Engine) -> str:
    """The schema owner made on the scratch database, then migrating it; its URL."""
    owner_url = ensure_schema_owner(_url(scratch_engine), OWNER, PASSWORD)
    owner = Database(owner_url, pool_size=1)
    try:
        migrate.upgrade(owner.engine)
    finally:
        owner.dispose()
    return owner_url


def test_a_fresh_database_is_migrated_by_an_owner_that_is_no_superuser(
    scratch_engine: Engine,
) -> None:
    owner_url = _migrated_by_owner(scratch_engine)

    assert _facts(owner_url) == EXPECTED_FACTS
    assert _not_owned(owner_url) == []
    # The components' logins are the owner's to make (CREATEROLE), as in the chart.
    passwords = dict.fromkeys(Component, "a-password-of-the-tests")
    logins = grant_component_logins(owner_url, prefix="achilles_test_owned", passwords=passwords)
    assert "achilles_test_owned_runner" in logins.runner


def test_a_database_an_older_stack_migrated_as_the_superuser_is_taken_over(
    scratch_engine: Engine,
) -> None:
    migrate.upgrade(scratch_engine)  # as the superuser, as `make dev` did before
    assert _not_owned(_url(scratch_engine)) != []

    owner_url = ensure_schema_owner(_url(scratch_engine), OWNER, PASSWORD)

    assert _not_owned(owner_url) == []
    owner = Database(owner_url, pool_size=1)
    try:
        # The owner may take the history down and up again: every object is its own.
        migrate.downgrade(owner.engine, "0015_owner_deactivated")
        migrate.upgrade(owner.engine)
    finally:
        owner.dispose()
    assert _facts(owner_url) == EXPECTED_FACTS


def _login_rows(engine: Engine, prefix: str) -> dict[str, tuple[object, ...]]:
    """As the superuser: each login's attributes, groups and SCRAM verifier."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT a.rolname, a.rolsuper, a.rolbypassrls, a.rolcanlogin, a.rolcreaterole,"
                " ARRAY(SELECT g.rolname::text FROM pg_auth_members m"
                "       JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = a.oid) AS groups,"
                " a.rolpassword"
                " FROM pg_authid a WHERE a.rolname LIKE :prefix || '\\_%'"
            ),
            {"prefix": prefix},
        )
        return {row.rolname: tuple(row)[1:] for row in rows}


def test_the_owner_grants_existing_logins_again_with_their_new_passwords(
    scratch_engine: Engine,
) -> None:
    # A second `make dev` (or the chart's installer running `achilles db login` again):
    # the logins exist, and the owner, no superuser, may not restate NOSUPERUSER or
    # NOBYPASSRLS (PostgreSQL refuses any word on those attributes from a non-superuser).
    owner_url = _migrated_by_owner(scratch_engine)
    prefix = "achilles_test_again"
    grant_component_logins(
        owner_url, prefix=prefix, passwords=dict.fromkeys(Component, "first" * 4)
    )
    first = _login_rows(scratch_engine, prefix)

    grant_component_logins(
        owner_url, prefix=prefix, passwords=dict.fromkeys(Component, "second" * 4)
    )
    second = _login_rows(scratch_engine, prefix)

    assert sorted(second) == [f"{prefix}_{component}" for component in sorted(Component)]
    for name, (
        superuser,
        bypasses_rls,
        can_login,
        creates_roles,
        groups,
        verifier,
    ) in second.items():
        component = Component(name.removeprefix(f"{prefix}_"))
        assert (superuser, bypasses_rls, can_login, creates_roles) == (False, False, True, False)
        assert groups == [GROUP_ROLES[component]]
        assert str(verifier).startswith("SCRAM-SHA-256$")
        assert verifier != first[name][-1], f"{name}'s password was not set again"
