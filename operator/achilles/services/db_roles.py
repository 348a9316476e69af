"""Who connects as what: logins for the components' roles, and the check at start-up.

Migration 0011_least_privilege made one group role per component; an installer (or
`achilles dev up`) makes each component a login of its own with `achilles db login`,
connected as the migrations' login. The operator and the API refuse to run as a login
that would make the roles moot (a superuser, a BYPASSRLS role, the tables' owner) unless
told to (`ACHILLES_ALLOW_SUPERUSER=true`, for a first try).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from achilles.db import roles
from achilles.db.database import Database
from achilles.db.roles import Component
from achilles.db.superuser_opt_in import ALLOW_SUPERUSER_ENV
from achilles.errors import ConfigurationError, InvalidInputError, SchemaError

log = logging.getLogger(__name__)

# A generated password is 32+ characters; a person's should not be much weaker.
MIN_PASSWORD_LENGTH = 16


@dataclass(frozen=True)
class LoginGranted:
    login: str
    group: str
    created: bool


def grant_login(
    database: Database, component: Component, login: str, password: str
) -> LoginGranted:
    """Create (or update the password of) `login`, a member of `component`'s role only."""
    roles.check_login_name(login)
    if len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInputError(
            f"the password is {len(password)} characters; use at least {MIN_PASSWORD_LENGTH}"
        )
    group = roles.GROUP_ROLES[component]
    with database.connection_errors(), database.engine.begin() as conn:
        missing = roles.missing_group_roles(conn)
        if missing:
            raise SchemaError(
                f"roles {', '.join(missing)} do not exist: run `achilles db upgrade` first"
            )
        facts = roles.login_facts(conn, login)
        problems = facts.too_powerful()
        if problems:
            raise InvalidInputError(
                f"login {login!r} {' and '.join(problems)}; a component's login must not"
                " (pick another name)"
            )
        others = sorted(facts.groups & (set(roles.GROUP_ROLES.values()) - {group}))
        if others:
            raise InvalidInputError(
                f"login {login!r} is already a member of {', '.join(others)}: one login"
                " serves one component"
            )
        roles.set_login(conn, facts, component, password)
    return LoginGranted(login=login, group=group, created=not facts.exists)


def grant_login_url(database: Database, component: Component, login: str, password: str) -> str:
    """`grant_login`, then the URL of `database` with that login in place of its own (for
    tools that make a component's login and hand its URL on: the dev stack, benchmarks)."""
    grant_login(database, component, login, password)
    url = database.url.set(username=login, password=password)
    # Not the admin's name: the component's process names itself in pg_stat_activity.
    url = url.difference_update_query(["application_name"])
    return url.render_as_string(hide_password=False)


def refuse_powerful_login(database: Database, component: Component, *, allow: bool) -> None:
    """Raise when this process's login is more than its component needs, unless `allow`."""
    with database.connection_errors(), database.engine.connect() as conn:
        facts = roles.current_login(conn)
    problems = facts.too_powerful()
    if not problems:
        return
    what = f"the {component}'s database login {facts.name!r} {' and '.join(problems)}"
    if allow:
        log.warning("%s; running anyway (%s=true)", what, ALLOW_SUPERUSER_ENV)
        return
    raise ConfigurationError(
        f"{what}: it could read and rewrite every owner's data. Connect as a member of"
        f" {roles.GROUP_ROLES[component]} (`achilles db login {component} LOGIN`, docs/"
        f"operator.md), or set {ALLOW_SUPERUSER_ENV}=true for a first try"
    )
