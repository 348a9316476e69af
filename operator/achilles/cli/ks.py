"""`achilles ks`: the Knowledge Store reference implementation - load demo documents, look."""

from __future__ import annotations

from pathlib import Path

import click

from achilles.cli.common import (
    UserKey,
    WholeNumber,
    database_url_option,
    echo_json,
    reports_errors,
)


@click.group()
def ks() -> None:
    """Knowledge Store (the standalone PostgreSQL reference implementation)."""


@ks.command()
@database_url_option
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@reports_errors
def load(database_url: str | None, file: Path) -> None:
    """Import documents, groups, access lists and links from a YAML or JSON FILE.

    Documents are matched by `key`, so loading a file again updates in place.
    The format is described in achilles/ks/bundle.py.
    """
    import yaml
    from pydantic import ValidationError

    from achilles.cli.common import open_database
    from achilles.domain.validation import describe_document_error
    from achilles.ks.bundle import KnowledgeBundle
    from achilles.services.knowledge import load_bundle

    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise click.UsageError(f"{file}: not valid YAML/JSON: {exc}") from exc
    try:
        bundle = KnowledgeBundle.model_validate(data)
    except ValidationError as exc:
        raise click.UsageError(describe_document_error(exc, str(file), data)) from exc
    summary = load_bundle(open_database(database_url), bundle)
    click.echo(
        f"loaded {file}: {summary.documents_created} document(s) created, "
        f"{summary.documents_updated} updated, {summary.documents_unchanged} unchanged; "
        f"{summary.grants} grant(s), {summary.groups} group(s), {summary.links} link(s), "
        f"{summary.users_created} user(s) created"
    )


@ks.command()
@database_url_option
@click.option(
    "--as",
    "user",
    required=True,
    type=UserKey(),
    metavar="USER",
    help="Search with this user's access rights.",
)
@click.option("--limit", type=WholeNumber(1, 100), default=10, show_default=True)
@click.argument("query")
@reports_errors
def search(database_url: str | None, user: str, limit: int, query: str) -> None:
    """Search as USER would through an agent (prints JSON)."""
    from achilles.cli.common import open_database
    from achilles.services.knowledge import search_as

    hits = search_as(open_database(database_url), user, query, limit=limit)
    echo_json([{"id": h.document_id, "title": h.title, "snippet": h.snippet} for h in hits])


@ks.command()
@database_url_option
@click.option(
    "--as",
    "user",
    required=True,
    type=UserKey(),
    metavar="USER",
    help="Read with this user's access rights.",
)
@click.argument("document_id", type=WholeNumber(min=1))
@reports_errors
def read(database_url: str | None, user: str, document_id: int) -> None:
    """Read a document as USER would through an agent (prints JSON; exit 1 if not visible)."""
    from achilles.cli.common import open_database
    from achilles.services.knowledge import read_as

    document = read_as(open_database(database_url), user, document_id)
    echo_json(
        {
            "id": document.document_id,
            "key": document.key,
            "title": document.title,
            "body": document.body,
            "updated_at": document.updated_at,
        }
    )


@ks.command()
@database_url_option
@click.argument("name", required=False, metavar="[LANGUAGE]")
@reports_errors
def language(database_url: str | None, name: str | None) -> None:
    """Show or set the search language (a PostgreSQL text search configuration).

    Stemming languages match word forms ("deploy" finds "deployment"); `simple` matches
    exact words. The default is english. Setting it re-indexes every document.
    """
    from achilles.cli.common import open_database
    from achilles.errors import InvalidInputError
    from achilles.services.knowledge import search_language, set_search_language

    database = open_database(database_url)
    if name is None:
        current = search_language(database)
        click.echo(f"search language: {current.name}")
        click.echo(f"available: {', '.join(current.available)}")
        return
    try:
        reindexed = set_search_language(database, name)
    except InvalidInputError as exc:
        raise click.BadParameter(str(exc), param_hint="LANGUAGE") from exc
    click.echo(f"search language: {name} ({reindexed} document(s) re-indexed)")
