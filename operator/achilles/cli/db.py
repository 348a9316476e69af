"""`achilles db`: schema migrations (`achilles.services.schema`)."""

from __future__ import annotations

from typing import Any

import click

from achilles.cli.common import database_url_option, reports_errors


def _names(revisions: frozenset[str]) -> str:
    return ", ".join(sorted(revisions)) or "base"


@click.group()
def db() -> None:
    """Database schema management."""


class Revision(click.ParamType[str, Any]):
    """A migration revision: an id (or a unique prefix), `heads`, `base`, or a relative
    step; checked against the migrations before anything connects."""

    name = "revision"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from achilles.db.migrate import check_revision
        from achilles.errors import InvalidInputError

        try:
            return check_revision(str(value))
        except InvalidInputError as exc:
            self.fail(str(exc), param, ctx)


@db.command()
@database_url_option
@click.argument("revision", type=Revision(), default="heads")
@reports_errors
def upgrade(database_url: str | None, revision: str) -> None:
    """Apply migrations up to REVISION (default: heads; a no-op when already there)."""
    from achilles.cli.common import open_database
    from achilles.services import schema

    change = schema.upgrade(open_database(database_url), revision)
    if change.before == change.after:
        click.echo(f"schema already at {_names(change.after)}; nothing to do")
    else:
        click.echo(f"schema upgraded: {_names(change.before)} -> {_names(change.after)}")


@db.command()
@database_url_option
@click.argument("revision", type=Revision())
@reports_errors
def downgrade(database_url: str | None, revision: str) -> None:
    """Revert migrations down to REVISION (`base` drops the schema and its data)."""
    from achilles.cli.common import open_database
    from achilles.services import schema

    applied = schema.downgrade(open_database(database_url), revision)
    click.echo(f"schema at {_names(applied)}")


@db.command()
@database_url_option
@reports_errors
def current(database_url: str | None) -> None:
    """Show the applied revisions and whether the schema is up to date."""
    from achilles.cli.common import open_database
    from achilles.services import schema

    found = schema.status(open_database(database_url))
    status = "up to date" if found.is_current else f"behind (heads: {_names(found.heads)})"
    click.echo(f"{_names(found.applied)}: {status}")


LOGIN_PASSWORD_ENV = "ACHILLES_DB_LOGIN_PASSWORD"  # noqa: S105 - an environment variable's name


@db.command()
@database_url_option
@click.argument("component", type=click.Choice(["operator", "runner", "api"]))
@click.argument("login")
@reports_errors
def login(database_url: str | None, component: str, login: str) -> None:
    """Make LOGIN the database login of COMPONENT (idempotent).

    Creates the role (or sets its password) and makes it a member of the component's
    role only (docs/operator.md has what each may do). The password comes from
    ACHILLES_DB_LOGIN_PASSWORD, never an argument, and reaches the server as a SCRAM
    verifier. Connect as the migrations' login (it needs CREATEROLE).
    """
    import os

    from achilles.cli.common import open_database
    from achilles.db.roles import Component
    from achilles.errors import InvalidInputError
    from achilles.services import db_roles

    password = os.environ.get(LOGIN_PASSWORD_ENV, "")
    if not password:
        raise InvalidInputError(f"set {LOGIN_PASSWORD_ENV} to the login's password")
    database = open_database(database_url)
    granted = db_roles.grant_login(database, Component(component), login, password)
    verb = "created" if granted.created else "updated"
    click.echo(f"login {granted.login} {verb}: a member of {granted.group}")


@db.command()
def roles() -> None:
    """Show each component's database role and what it may do."""
    from achilles.cli.common import echo_table
    from achilles.db.roles import GROUP_ROLES, PRIVILEGES

    echo_table(
        ["component", "role", "may"],
        [[str(c), GROUP_ROLES[c], PRIVILEGES[c]] for c in GROUP_ROLES],
    )
