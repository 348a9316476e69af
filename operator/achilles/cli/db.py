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
