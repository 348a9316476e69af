"""The Knowledge Store as the agent tools see it: read-only, always on behalf of one user.

The real Knowledge Store is a neighbour service; the engine depends only on this
interface. `achilles.db.knowledge.PostgresKnowledgeStore` is the reference
implementation for standalone installs and tests, where the database itself
enforces the user's access rights (row-level security).

Every method takes the user whose rights apply. A document that does not exist
and one the user may not see are indistinguishable: both are `None` / absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class SearchHit:
    document_id: int
    title: str
    snippet: str
    rank: float


@dataclass(frozen=True)
class Document:
    document_id: int
    key: str
    title: str
    body: str
    updated_at: datetime


@dataclass(frozen=True)
class RelatedDocument:
    document_id: int
    title: str
    relation: str
    # "outgoing": the given document links to this one; "incoming": this one links to it.
    direction: str


class KnowledgeStore(Protocol):
    def search(self, user_id: int, query: str, *, limit: int) -> list[SearchHit]:
        """Documents matching any word of `query`, best first."""
        ...

    def read(self, user_id: int, document_id: int) -> Document | None:
        """The document, or None when it does not exist or the user may not see it."""
        ...

    def related(
        self, user_id: int, document_id: int, *, limit: int
    ) -> list[RelatedDocument] | None:
        """Documents linked to the given one (both ends visible), or None when the
        document itself does not exist or the user may not see it."""
        ...
