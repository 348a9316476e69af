"""`achilles db`: schema migrations (`achilles.services.schema`)."""

from __future__ import annotations

import click

from achilles.cli.common import database_url_option, reports_errors


def _names(revisions: frozenset[str]) -> str:
    return ", ".join(sorted(revisions)) or "base"


@click.group()
def db() -> None:
    """Database schema management."""


@db.command()
@database_url_option
@click.option("--revision", default="heads", show_default=True, help="Target revision.")
@reports_errors
def upgrade(database_url: str | None, revision: str) -> None:
    """Apply migrations up to REVISION (a no-op when already there)."""
    from achilles.cli.common import open_database
    from achilles.services import schema

    change = schema.upgrade(open_database(database_url), revision)
    if change.before == change.after:
        click.echo(f"schema already at {_names(change.after)}; nothing to do")
    else:
        click.echo(f"schema upgraded: {_names(change.before)} -> {_names(change.after)}")


@db.command()
@database_url_option
@click.argument("revision")
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
