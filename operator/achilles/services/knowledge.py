"""The Knowledge Store reference implementation as operators use it: load a bundle, and
search or read as a given user would through an agent (under that user's rights)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from achilles.db.database import Database
from achilles.db.knowledge import settings, store
from achilles.db.knowledge.settings import SearchLanguage
from achilles.errors import NotFound
from achilles.ks.store import Document, SearchHit

if TYPE_CHECKING:
    from achilles.db.knowledge.load import LoadSummary
    from achilles.ks.bundle import KnowledgeBundle


def load_bundle(database: Database, bundle: KnowledgeBundle) -> LoadSummary:
    """All of the bundle in one transaction, or nothing; loading it again changes nothing."""
    # Imported here: the bundle's models load pydantic, which searching and reading
    # (the CLI's other uses of this module) do without.
    from achilles.db.knowledge import load

    with database.transaction() as session:
        return load.load_bundle(session, bundle)


def search_as(database: Database, user_key: str, query: str, *, limit: int) -> list[SearchHit]:
    user_id = _user_id(database, user_key)
    with database.connection_errors():
        return store.PostgresKnowledgeStore(database.sessions).search(user_id, query, limit=limit)


def read_as(database: Database, user_key: str, document_id: int) -> Document:
    """The document as the user may see it; `NotFound` when it is not visible to them."""
    user_id = _user_id(database, user_key)
    with database.connection_errors():
        document = store.PostgresKnowledgeStore(database.sessions).read(user_id, document_id)
    if document is None:
        raise NotFound(f"document {document_id} not found for {user_key!r}")
    return document


def search_language(database: Database) -> SearchLanguage:
    """The installation's search language and the ones PostgreSQL offers."""
    with database.transaction() as session:
        return settings.search_language(session)


def set_search_language(database: Database, name: str) -> int:
    """Search in `name` from now on; every document is re-indexed (returns how many)."""
    with database.transaction() as session:
        return settings.set_search_language(session, name)


def _user_id(database: Database, key: str) -> int:
    with database.transaction() as session:
        user_id = store.user_id_by_key(session, key)
    if user_id is None:
        raise NotFound(f"user {key!r} does not exist")
    return user_id
