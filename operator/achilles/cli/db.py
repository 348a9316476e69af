"""`achilles db`: schema migrations."""

from __future__ import annotations

import click

from achilles.cli.common import database_url_option, reports_errors


def _names(revisions: set[str]) -> str:
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
    from achilles.db import migrate

    database = open_database(database_url)
    engine = database.engine
    with database.connection_errors():
        before = migrate.current_revisions(engine)
        migrate.upgrade(engine, revision)
        after = migrate.current_revisions(engine)
    if before == after:
        click.echo(f"schema already at {_names(after)}; nothing to do")
    else:
        click.echo(f"schema upgraded: {_names(before)} -> {_names(after)}")


@db.command()
@database_url_option
@click.argument("revision")
@reports_errors
def downgrade(database_url: str | None, revision: str) -> None:
    """Revert migrations down to REVISION (`base` drops the schema and its data)."""
    from achilles.cli.common import open_database
    from achilles.db import migrate

    database = open_database(database_url)
    engine = database.engine
    with database.connection_errors():
        migrate.downgrade(engine, revision)
        click.echo(f"schema at {_names(migrate.current_revisions(engine))}")


@db.command()
@database_url_option
@reports_errors
def current(database_url: str | None) -> None:
    """Show the applied revisions and whether the schema is up to date."""
    from achilles.cli.common import open_database
    from achilles.db import migrate

    database = open_database(database_url)
    engine = database.engine
    with database.connection_errors():
        applied = migrate.current_revisions(engine)
    heads = migrate.head_revisions()
    status = "up to date" if applied == heads else f"behind (heads: {_names(heads)})"
    click.echo(f"{_names(applied)}: {status}")
