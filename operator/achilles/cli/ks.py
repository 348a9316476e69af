"""`achilles ks`: the Knowledge Store reference implementation - load demo documents, look."""

from __future__ import annotations

from pathlib import Path

import click

from achilles.cli.common import database_url_option, echo_json, reports_errors


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
    from achilles.db.knowledge.load import load_bundle
    from achilles.ks.bundle import KnowledgeBundle

    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise click.UsageError(f"{file}: not valid YAML/JSON: {exc}") from exc
    try:
        bundle = KnowledgeBundle.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "file"
        raise click.UsageError(f"{file}: {where}: {first['msg']}") from exc
    with open_database(database_url).transaction() as session:
        summary = load_bundle(session, bundle)
    click.echo(
        f"loaded {file}: {summary.documents_created} document(s) created, "
        f"{summary.documents_updated} updated, {summary.documents_unchanged} unchanged; "
        f"{summary.grants} grant(s), {summary.groups} group(s), {summary.links} link(s), "
        f"{summary.users_created} user(s) created"
    )


def _user_id(database_url: str | None, key: str) -> int:
    from achilles.cli.common import open_database
    from achilles.db.knowledge.store import user_id_by_key
    from achilles.errors import NotFound

    with open_database(database_url).transaction() as session:
        user_id = user_id_by_key(session, key)
    if user_id is None:
        raise NotFound(f"user {key!r} does not exist")
    return user_id


@ks.command()
@database_url_option
@click.option("--as", "user", required=True, help="Search with this user's access rights.")
@click.option("--limit", type=click.IntRange(1, 100), default=10, show_default=True)
@click.argument("query")
@reports_errors
def search(database_url: str | None, user: str, limit: int, query: str) -> None:
    """Search as USER would through an agent (prints JSON)."""
    from achilles.cli.common import open_database
    from achilles.db.knowledge.store import PostgresKnowledgeStore

    user_id = _user_id(database_url, user)
    with open_database(database_url).connection_errors():
        hits = PostgresKnowledgeStore(open_database(database_url).sessions).search(
            user_id, query, limit=limit
        )
    echo_json([{"id": h.document_id, "title": h.title, "snippet": h.snippet} for h in hits])


@ks.command()
@database_url_option
@click.option("--as", "user", required=True, help="Read with this user's access rights.")
@click.argument("document_id", type=click.IntRange(min=1))
@reports_errors
def read(database_url: str | None, user: str, document_id: int) -> None:
    """Read a document as USER would through an agent (prints JSON; exit 1 if not visible)."""
    from achilles.cli.common import open_database
    from achilles.db.knowledge.store import PostgresKnowledgeStore
    from achilles.errors import NotFound

    user_id = _user_id(database_url, user)
    with open_database(database_url).connection_errors():
        document = PostgresKnowledgeStore(open_database(database_url).sessions).read(
            user_id, document_id
        )
    if document is None:
        raise NotFound(f"document {document_id} not found for {user!r}")
    echo_json(
        {
            "id": document.document_id,
            "key": document.key,
            "title": document.title,
            "body": document.body,
            "updated_at": document.updated_at,
        }
    )
