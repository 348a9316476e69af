"""The database's roles, as migration 0011_least_privilege made them, and their logins.

Each component connects as a LOGIN role that is a member of its group role
(`achilles_operator`, `achilles_runner`, `achilles_api`); the migrations' login owns the
schema. These are the queries: what a login is (superuser? owner?), and making one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

import psycopg
from psycopg import sql
from sqlalchemy import Connection, text

from achilles.errors import InvalidInputError


class Component(StrEnum):
    OPERATOR = "operator"
    RUNNER = "runner"
    API = "api"


GROUP_ROLES = {
    Component.OPERATOR: "achilles_operator",
    Component.RUNNER: "achilles_runner",
    Component.API: "achilles_api",
}
KS_READER_ROLE = "achilles_ks_reader"
# What each may do: the role table of docs/operator.md and `achilles db roles`.
PRIVILEGES = {
    Component.OPERATOR: (
        "reads and writes the journal and the inbox (runs, agents, owners, models, tools,"
        " settings); reads the deleted agents' tokens and the event log; no DDL, no"
        " Knowledge Store"
    ),
    Component.RUNNER: (
        "only the run whose id and secret its session carries (ACHILLES_RUN_SECRET, one per"
        " Job): claim it, beat, add tokens, finish it, record its steps and what it used;"
        " read its agent, owner, model, tools,"
        " settings and its owner's documents; ask and move its agent's inbox items;"
        " nothing once the run ended"
    ),
    Component.API: (
        "reads the journal and the inbox; writes replies, its idempotency keys and purges"
        " the event log; no runs written, no Knowledge Store"
    ),
}
_LOGIN_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True)
class LoginFacts:
    """What the database says about one login."""

    name: str
    exists: bool
    superuser: bool = False
    bypasses_rls: bool = False
    can_login: bool = False
    owned_tables: int = 0
    groups: frozenset[str] = frozenset()

    def too_powerful(self) -> list[str]:
        """Why this login may not serve a component, if it may not."""
        found = []
        if self.superuser:
            found.append("is a superuser")
        if self.bypasses_rls:
            found.append("bypasses row-level security (BYPASSRLS)")
        if self.owned_tables:
            found.append(f"owns {self.owned_tables} of the schema's tables (the migrations' role)")
        return found


def check_login_name(name: str) -> str:
    if not _LOGIN_NAME.fullmatch(name):
        raise InvalidInputError(
            f"login {name!r} is not a plain role name: lower-case letters, digits and"
            " underscores, starting with a letter or underscore, at most 63 characters"
        )
    if name in GROUP_ROLES.values() or name == KS_READER_ROLE:
        raise InvalidInputError(
            f"{name!r} is a group role of the migrations; give the login a name of its own"
            " (it becomes a member of the group)"
        )
    return name


def login_facts(conn: Connection, name: str) -> LoginFacts:
    row = conn.execute(
        text(
            """
            SELECT r.rolsuper, r.rolbypassrls, r.rolcanlogin,
                   (SELECT count(*) FROM pg_class c
                    WHERE c.relowner = r.oid AND c.relkind IN ('r', 'p')
                      AND c.relnamespace = current_schema()::regnamespace) AS owned,
                   ARRAY(SELECT g.rolname FROM pg_auth_members m
                         JOIN pg_roles g ON g.oid = m.roleid
                         WHERE m.member = r.oid) AS groups
            FROM pg_roles r WHERE r.rolname = :name
            """
        ),
        {"name": name},
    ).one_or_none()
    if row is None:
        return LoginFacts(name=name, exists=False)
    return LoginFacts(
        name=name,
        exists=True,
        superuser=row.rolsuper,
        bypasses_rls=row.rolbypassrls,
        can_login=row.rolcanlogin,
        owned_tables=int(row.owned),
        groups=frozenset(row.groups),
    )


def current_login(conn: Connection) -> LoginFacts:
    name = conn.execute(text("SELECT session_user")).scalar_one()
    return login_facts(conn, str(name))


def missing_group_roles(conn: Connection) -> list[str]:
    found = set(
        conn.execute(
            text("SELECT rolname FROM pg_roles WHERE rolname = ANY(:names)"),
            {"names": list(GROUP_ROLES.values())},
        ).scalars()
    )
    return [role for role in GROUP_ROLES.values() if role not in found]


def set_login(conn: Connection, facts: LoginFacts, component: Component, password: str) -> None:
    """Create the login (or update its password) and make it a member of its group.
    Idempotent, also as the migrations' login that is no superuser.

    The password never travels in a statement: libpq turns it into the server's SCRAM
    verifier first (`PQencryptPasswordConn`), so neither the server's log nor
    pg_stat_activity ever shows it."""
    raw = conn.connection.dbapi_connection
    assert raw is not None
    verifier = raw.pgconn.encrypt_password(
        password.encode(), facts.name.encode(), b"scram-sha-256"
    ).decode()
    verb = "ALTER" if facts.exists else "CREATE"
    # PostgreSQL lets only a superuser state SUPERUSER or BYPASSRLS in an ALTER ROLE, even
    # to say NO: the migrations' login (CREATEROLE, no superuser, as the chart wants it)
    # could make a login once and never set its password again. So an existing login's
    # ALTER states them only when they are to change, which that login may not do anyway.
    attributes = ["LOGIN"]
    if not facts.exists or facts.superuser:
        attributes.append("NOSUPERUSER")
    if not facts.exists or facts.bypasses_rls:
        attributes.append("NOBYPASSRLS")
    attributes += ["NOCREATEDB", "NOCREATEROLE", "INHERIT"]
    statement = sql.SQL("{verb} ROLE {login} {attributes} PASSWORD {verifier}").format(
        verb=sql.SQL(verb),
        login=sql.Identifier(facts.name),
        attributes=sql.SQL(" ".join(attributes)),
        verifier=sql.Literal(verifier),
    )
    grant = sql.SQL("GRANT {group} TO {login}").format(
        group=sql.Identifier(GROUP_ROLES[component]), login=sql.Identifier(facts.name)
    )
    cursor = raw.cursor()
    try:
        cursor.execute(statement)
        cursor.execute(grant)
    except psycopg.errors.InsufficientPrivilege as exc:
        detail = str(exc).splitlines()[0]
        raise InvalidInputError(
            f"this login may not manage roles ({detail}): connect as the migrations' login,"
            " which needs CREATEROLE"
        ) from exc
