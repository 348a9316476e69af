"""The components' database logins on a local server: what the operator, the run pods and
the API connect as instead of the superuser (docs/operator.md, "Database roles").

`achilles dev up`, the cluster tests, the fault suite and the benchmarks make them the way
an installer does (`achilles db login COMPONENT LOGIN`, connected as the migrations' login
after the migrations made the group roles) and give each component its own login's URL.
The dev stack's passwords are generated once and kept in its state directory (mode
0600), so a second `up` keeps the logins the running pods use.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from achilles.db.database import Database
from achilles.db.roles import Component
from achilles.errors import LocalStackError
from achilles.services import schema
from achilles.services.db_roles import grant_login
from achilles_dev.config import StackConfig

# The server's superuser: the person's own CLI on loopback, and what makes the owner.
SUPERUSER_KEY = "postgres"
# The migrations' login, as the chart wants it (charts/achilles/README.md): it owns the
# database and the schema and may create roles, and is no superuser, so the schema's
# SECURITY DEFINER functions run as a plain role (issue 37). The chart's migration Job
# logs in as it over the pods' network with its password.
OWNER_KEY = "owner"
OWNER_LOGIN = "achilles_dev_owner"
# The dev stack's logins: achilles_dev_operator, achilles_dev_runner, achilles_dev_api.
DEV_PREFIX = "achilles_dev"
PASSWORDS_FILE = "database-passwords.json"


@dataclass(frozen=True)
class ComponentLogins:
    """The migrations' URL (the schema owner's) and each component's (its own login's)."""

    migrations: str
    operator: str
    runner: str
    api: str

    def url(self, component: Component) -> str:
        urls = {
            Component.OPERATOR: self.operator,
            Component.RUNNER: self.runner,
            Component.API: self.api,
        }
        return urls[component]

    def on_host(self, host: str) -> ComponentLogins:
        """The same logins at another address (the host as pods reach it)."""
        return ComponentLogins(
            migrations=with_login(self.migrations, host=host),
            operator=with_login(self.operator, host=host),
            runner=with_login(self.runner, host=host),
            api=with_login(self.api, host=host),
        )


def login_name(prefix: str, component: Component) -> str:
    return f"{prefix}_{component}"


def grant_component_logins(
    admin_url: str, *, prefix: str, passwords: Mapping[Component, str]
) -> ComponentLogins:
    """Create (or update) `<prefix>_operator`, `_runner` and `_api`, each a member of its
    component's role only, connected as `admin_url` (the migrations' login, on a migrated
    database); return their URLs (`admin_url`'s with each login in place)."""
    admin = Database(admin_url, pool_size=1, application_name="achilles-dev")
    try:
        urls = {}
        for component in Component:
            name = login_name(prefix, component)
            grant_login(admin, component, name, passwords[component])
            urls[component] = with_login(admin_url, user=name, password=passwords[component])
    finally:
        admin.dispose()
    return ComponentLogins(
        migrations=admin_url,
        operator=urls[Component.OPERATOR],
        runner=urls[Component.RUNNER],
        api=urls[Component.API],
    )


def stack_logins(config: StackConfig) -> ComponentLogins:
    """A dev stack's database, ready for its components: owned by `achilles_dev_owner`
    (no superuser, as in the chart) and migrated by it (the group roles exist only
    then), a login per component, all with the stack's stored passwords. URLs as the host
    reaches the server; `.on_host(config.apiserver_host)` for the pods' Secrets."""
    passwords = stored_passwords(config.state_dir / PASSWORDS_FILE)
    owner = ensure_schema_owner(config.database_url, OWNER_LOGIN, passwords[OWNER_KEY])
    admin = Database(owner, pool_size=1, application_name="achilles-dev")
    try:
        schema.upgrade(admin)
    finally:
        admin.dispose()
    logins = grant_component_logins(
        owner,
        prefix=DEV_PREFIX,
        passwords={component: passwords[str(component)] for component in Component},
    )
    return ComponentLogins(
        migrations=owner, operator=logins.operator, runner=logins.runner, api=logins.api
    )


# As the superuser: everything of the current schema a superuser owns, given to the
# owner (a stack migrated before issue 37 ran its migrations as `postgres`). A table's
# own sequences and indexes follow it.
_REASSIGN = """
DO $$
DECLARE
    found record;
BEGIN
    FOR found IN
        SELECT c.oid::regclass AS name FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
        WHERE c.relnamespace = current_schema()::regnamespace AND r.rolsuper
          AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
          AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                          AND d.objid = c.oid AND d.deptype IN ('a', 'i'))
    LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO %I', found.name, {owner});
    END LOOP;
    FOR found IN
        SELECT p.oid::regprocedure AS name FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner
        WHERE p.pronamespace = current_schema()::regnamespace AND r.rolsuper
    LOOP
        EXECUTE format('ALTER ROUTINE %s OWNER TO %I', found.name, {owner});
    END LOOP;
    FOR found IN
        SELECT t.oid::regconfig AS name FROM pg_ts_config t JOIN pg_roles r ON r.oid = t.cfgowner
        WHERE t.cfgnamespace = current_schema()::regnamespace AND r.rolsuper
    LOOP
        EXECUTE format('ALTER TEXT SEARCH CONFIGURATION %s OWNER TO %I', found.name, {owner});
    END LOOP;
    FOR found IN
        SELECT t.oid::regtype AS name FROM pg_type t JOIN pg_roles r ON r.oid = t.typowner
        WHERE t.typnamespace = current_schema()::regnamespace AND r.rolsuper
          AND t.typtype IN ('e', 'd') AND t.typrelid = 0
    LOOP
        EXECUTE format('ALTER TYPE %s OWNER TO %I', found.name, {owner});
    END LOOP;
END
$$
"""


def ensure_schema_owner(admin_url: str, name: str, password: str) -> str:
    """As `admin_url`'s superuser: make `name` the migrations' login the chart asks for
    (LOGIN CREATEROLE, no superuser, no BYPASSRLS), owning the database, its schema and
    whatever a superuser made in that schema; return `admin_url` with `name` and
    `password` in its place. Idempotent."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(libpq_url(admin_url), autocommit=True) as connection:
        verifier = connection.pgconn.encrypt_password(
            password.encode(), name.encode(), b"scram-sha-256"
        ).decode()
        exists = connection.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
        connection.execute(
            sql.SQL(
                "{verb} ROLE {name} LOGIN CREATEROLE NOSUPERUSER NOBYPASSRLS NOCREATEDB"
                " PASSWORD {verifier}"
            ).format(
                verb=sql.SQL("ALTER" if exists else "CREATE"),
                name=sql.Identifier(name),
                verifier=sql.Literal(verifier),
            )
        )
        where = connection.execute("SELECT current_database(), current_schema()").fetchone()
        assert where is not None
        database, schema = where
        for kind, object_name in (("DATABASE", database), ("SCHEMA", schema)):
            connection.execute(
                sql.SQL("ALTER {} {} OWNER TO {}").format(
                    sql.SQL(kind), sql.Identifier(object_name), sql.Identifier(name)
                )
            )
        connection.execute(sql.SQL(_REASSIGN).format(owner=sql.Literal(name)))
    return with_login(admin_url, user=name, password=password)


def stored_passwords(path: Path) -> dict[str, str]:
    """The stack's passwords (the superuser's and each component login's): read from
    `path`, or made once and written there, readable by its owner only."""
    wanted = [SUPERUSER_KEY, OWNER_KEY, *(str(c) for c in Component)]
    found: dict[str, str] = {}
    if path.exists():
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise LocalStackError(
                f"cannot read the database passwords in {path}: {error} (remove the file:"
                " the next `achilles dev up` makes new ones and sets them)"
            ) from error
        if isinstance(document, dict):
            found = {k: v for k, v in document.items() if isinstance(v, str) and v}
    if all(key in found for key in wanted):
        path.chmod(0o600)
        return found
    passwords = {key: found.get(key) or secrets.token_urlsafe(32) for key in wanted}
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created 0600 before anything is written: never readable by others, not even briefly.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(passwords, file, indent=2)
    path.chmod(0o600)
    return passwords


def set_superuser_password(admin_url: str, password: str) -> str:
    """Give `admin_url`'s login `password` (sent as a SCRAM verifier, never as text);
    return `admin_url` carrying it. Loopback stays trusted (the person's own CLI)."""
    import psycopg
    from psycopg import sql

    user = unquote(urlsplit(admin_url).username or SUPERUSER_KEY)
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as connection:
        verifier = connection.pgconn.encrypt_password(
            password.encode(), user.encode(), b"scram-sha-256"
        ).decode()
        connection.execute(
            sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(user), sql.Literal(verifier))
        )
    return with_login(admin_url, password=password)


def libpq_url(url: str) -> str:
    """A `postgresql+psycopg://` URL as libpq takes it."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql"))


def with_login(
    url: str, *, user: str | None = None, password: str | None = None, host: str | None = None
) -> str:
    """`url` with another user, password or host (the rest as it was)."""
    parts = urlsplit(url)
    user = user if user is not None else unquote(parts.username or "")
    password = password if password is not None else unquote(parts.password or "")
    host = host if host is not None else (parts.hostname or "")
    credentials = quote(user, safe="")
    if password:
        credentials += ":" + quote(password, safe="")
    netloc = f"{credentials}@{host}" if credentials else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))
