"""The Knowledge Store's PostgreSQL reference implementation: reads under a user's rights.

Access is enforced by the database, not by this code: each read runs in its own
read-only transaction that switches to the `achilles_ks_reader` role (no
BYPASSRLS, SELECT only) and sets `achilles.ks_user_id` transaction-locally, so
the row-level security policies of migration `0002_knowledge_store` filter every
table. This holds even when the connection's login is a superuser (the test
suite) or the tables' owner (FORCE ROW LEVEL SECURITY). Whatever document id or
search a model asks for, rows outside the user's access simply do not exist here.

Production: the runner's database login must be a member of `achilles_ks_reader`
(`GRANT achilles_ks_reader TO <runner login>`), or `SET ROLE` fails and so does
every KS tool call - closed, never open.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from achilles.db.journal.models import User
from achilles.ks.store import Document, RelatedDocument, SearchHit

KS_READER_ROLE = "achilles_ks_reader"
KS_USER_SETTING = "achilles.ks_user_id"
# The installation's search language (migration 0008): the index and every query use it.
TEXT_SEARCH_CONFIG = "achilles_ks_text_search_config()"
# A KS read is a few index lookups; anything slower is a fault, not a wait.
STATEMENT_TIMEOUT_MS = 10_000
_WORD = re.compile(r"\w+")


@contextmanager
def reading_as(session_factory: sessionmaker[Session], user_id: int) -> Iterator[Session]:
    """A read-only transaction in which only `user_id`'s documents are visible."""
    with session_factory() as session, session.begin():
        # Must be the transaction's first statement.
        session.execute(text("SET TRANSACTION READ ONLY"))
        session.execute(text(f"SET LOCAL ROLE {KS_READER_ROLE}"))
        session.execute(
            text("SELECT set_config(:name, :value, true)"),
            {"name": KS_USER_SETTING, "value": str(user_id)},
        )
        session.execute(text(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}"))
        yield session


def any_word_query(query: str) -> str | None:
    """`websearch_to_tsquery` input matching any word of a free-text query.

    Models phrase searches as sentences; requiring every word would find
    nothing, so words are OR-ed and ranking puts the best matches first.
    Operators and quotes are dropped with the punctuation.
    """
    words = _WORD.findall(query)
    return " or ".join(words) if words else None


def user_id_by_key(session: Session, key: str) -> int | None:
    """The KS acts for users by id; people and the CLI name them by key."""
    return session.execute(select(User.id).where(User.key == key)).scalar_one_or_none()


class PostgresKnowledgeStore:
    """`achilles.ks.store.KnowledgeStore` over the `ks_*` tables."""

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._session_factory = session_factory

    def search(self, user_id: int, query: str, *, limit: int) -> list[SearchHit]:
        tsquery = any_word_query(query)
        if tsquery is None:
            return []
        with reading_as(self._session_factory, user_id) as session:
            rows = session.execute(
                text(
                    f"""
                    SELECT d.id, d.title,
                           ts_headline({TEXT_SEARCH_CONFIG}, d.body, q,
                                       'MaxWords=35, MinWords=10, MaxFragments=2,
                                        StartSel=**, StopSel=**') AS snippet,
                           ts_rank(d.search, q) AS rank
                    FROM ks_documents d,
                         websearch_to_tsquery({TEXT_SEARCH_CONFIG}, :query) AS q
                    WHERE d.search @@ q
                    ORDER BY rank DESC, d.id
                    LIMIT :limit
                    """
                ),
                {"query": tsquery, "limit": limit},
            ).all()
        return [
            SearchHit(document_id=row.id, title=row.title, snippet=row.snippet, rank=row.rank)
            for row in rows
        ]

    def read(self, user_id: int, document_id: int) -> Document | None:
        with reading_as(self._session_factory, user_id) as session:
            row = session.execute(
                text("SELECT id, key, title, body, updated_at FROM ks_documents WHERE id = :id"),
                {"id": document_id},
            ).first()
        if row is None:
            return None
        return Document(
            document_id=row.id,
            key=row.key,
            title=row.title,
            body=row.body,
            updated_at=row.updated_at,
        )

    def related(
        self, user_id: int, document_id: int, *, limit: int
    ) -> list[RelatedDocument] | None:
        with reading_as(self._session_factory, user_id) as session:
            visible = session.execute(
                text("SELECT 1 FROM ks_documents WHERE id = :id"), {"id": document_id}
            ).first()
            if visible is None:
                return None
            rows = session.execute(
                text(
                    """
                    SELECT d.id, d.title, l.relation, 'outgoing' AS direction
                    FROM ks_links l JOIN ks_documents d ON d.id = l.to_document_id
                    WHERE l.from_document_id = :id
                    UNION ALL
                    SELECT d.id, d.title, l.relation, 'incoming' AS direction
                    FROM ks_links l JOIN ks_documents d ON d.id = l.from_document_id
                    WHERE l.to_document_id = :id
                    ORDER BY direction DESC, id
                    LIMIT :limit
                    """
                ),
                {"id": document_id, "limit": limit},
            ).all()
        return [
            RelatedDocument(
                document_id=row.id, title=row.title, relation=row.relation, direction=row.direction
            )
            for row in rows
        ]
