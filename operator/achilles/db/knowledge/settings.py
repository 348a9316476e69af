"""The Knowledge Store's search language: which PostgreSQL text search configuration
indexes the documents and reads queries (migration `0008_ks_search_language`).

Stemming configurations match word forms ("deploy" finds "deployment"); `simple` matches
exact words only. The setting belongs to the installation; changing it rebuilds every
document's index in the same transaction, so searches never mix two languages.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from achilles.db.knowledge.models import KsSettings
from achilles.errors import InvalidInputError


@dataclass(frozen=True)
class SearchLanguage:
    name: str
    available: tuple[str, ...]


def search_language(session: Session) -> SearchLanguage:
    name = session.execute(text("SELECT achilles_ks_text_search_config()::text")).scalar_one()
    return SearchLanguage(name=str(name), available=available_search_languages(session))


def available_search_languages(session: Session) -> tuple[str, ...]:
    names = session.execute(text("SELECT cfgname FROM pg_ts_config ORDER BY cfgname")).scalars()
    return tuple(str(name) for name in names)


def set_search_language(session: Session, name: str) -> int:
    """Make `name` the search language and re-index every document with it; returns how
    many documents were re-indexed."""
    available = available_search_languages(session)
    if name not in available:
        raise InvalidInputError(
            f"unknown search language {name!r} (PostgreSQL text search configurations:"
            f" {', '.join(available)})"
        )
    session.execute(
        insert(KsSettings)
        .values(id=1, text_search_config=name)
        .on_conflict_do_update(index_elements=[KsSettings.id], set_={"text_search_config": name})
    )
    # The documents' rows are under FORCE ROW LEVEL SECURITY: write as maintenance.
    session.execute(text("SELECT set_config('achilles.ks_maintenance', 'on', true)"))
    result = session.execute(
        text(
            "UPDATE ks_documents"
            " SET search = to_tsvector(CAST(:name AS regconfig), title || ' ' || body)"
        ),
        {"name": name},
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
