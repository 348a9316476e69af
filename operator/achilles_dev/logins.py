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

# The server's superuser: the migrations' login. The chart's migration Job logs in as it
# over the pods' network, so in a dev stack it has a password too.
SUPERUSER_KEY = "postgres"
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
    """A dev stack's database, ready for its components: migrated (the group roles exist
    only then), a login per component and a password for the superuser (the migration
    Job's), all with the stack's stored passwords. URLs as the host reaches the server;
    `.on_host(config.apiserver_host)` for the pods' Secrets."""
    passwords = stored_passwords(config.state_dir / PASSWORDS_FILE)
    admin = Database(config.database_url, pool_size=1, application_name="achilles-dev")
    try:
        schema.upgrade(admin)
    finally:
        admin.dispose()
    logins = grant_component_logins(
        config.database_url,
        prefix=DEV_PREFIX,
        passwords={component: passwords[str(component)] for component in Component},
    )
    migrations = set_superuser_password(config.database_url, passwords[SUPERUSER_KEY])
    return ComponentLogins(
        migrations=migrations, operator=logins.operator, runner=logins.runner, api=logins.api
    )


def stored_passwords(path: Path) -> dict[str, str]:
    """The stack's passwords (the superuser's and each component login's): read from
    `path`, or made once and written there, readable by its owner only."""
    wanted = [SUPERUSER_KEY, *(str(c) for c in Component)]
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
