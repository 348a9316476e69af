"""Typed models of the Knowledge Store reference tables; the schema is migrations
`0002_knowledge_store` (with its row-level security, which models cannot express) and
`0008_ks_search_language` (the search language setting and the indexing trigger).

`tests/db/test_knowledge_store.py` proves these agree with the migration. The store's
queries are SQL text in `achilles.db.knowledge.store` (full-text search and RLS are
PostgreSQL's own); these models keep the metadata whole for schema checks and
give other code typed columns.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    FetchedValue,
    ForeignKey,
    Identity,
    Index,
    SmallInteger,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlalchemy.orm import Mapped, mapped_column

from achilles.db.journal.models import Base, timestamp_column


class KsDocument(Base):
    __tablename__ = "ks_documents"
    __table_args__ = (Index("ix_ks_documents_search", "search", postgresql_using="gin"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    key: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    title: Mapped[str] = mapped_column(Text, nullable=False)
    body: Mapped[str] = mapped_column(Text, nullable=False)
    # Filled by the `ks_documents_index` trigger in the installation's search language
    # (migration 0008, `ks_settings`).
    search: Mapped[str] = mapped_column(TSVECTOR, FetchedValue(), nullable=False)
    created_at: Mapped[datetime] = timestamp_column()
    updated_at: Mapped[datetime] = timestamp_column()


class KsSettings(Base):
    """The installation's Knowledge Store settings: at most one row (none: the defaults)."""

    __tablename__ = "ks_settings"
    __table_args__ = (CheckConstraint("id = 1", name="singleton"),)

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, server_default=text("1"))
    # A PostgreSQL text search configuration by name ('english' when there is no row).
    text_search_config: Mapped[str] = mapped_column(Text, nullable=False)


class KsGroup(Base):
    __tablename__ = "ks_groups"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    created_at: Mapped[datetime] = timestamp_column()


class KsGroupMember(Base):
    __tablename__ = "ks_group_members"

    group_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("ks_groups.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class KsDocumentAccess(Base):
    """A grant of one document to exactly one grantee: a user or a group."""

    __tablename__ = "ks_document_access"
    __table_args__ = (
        CheckConstraint("num_nonnulls(user_id, group_id) = 1", name="one_grantee"),
        Index(
            "uq_ks_document_access_user",
            "user_id",
            "document_id",
            unique=True,
            postgresql_where=text("user_id IS NOT NULL"),
        ),
        Index(
            "uq_ks_document_access_group",
            "group_id",
            "document_id",
            unique=True,
            postgresql_where=text("group_id IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    document_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("ks_documents.id", ondelete="CASCADE"), nullable=False, index=True
    )
    user_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("users.id", ondelete="CASCADE")
    )
    group_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("ks_groups.id", ondelete="CASCADE")
    )


class KsLink(Base):
    __tablename__ = "ks_links"
    __table_args__ = (CheckConstraint("from_document_id <> to_document_id", name="not_self"),)

    from_document_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("ks_documents.id", ondelete="CASCADE"), primary_key=True
    )
    to_document_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("ks_documents.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    relation: Mapped[str] = mapped_column(Text, primary_key=True, server_default=text("'related'"))
    created_at: Mapped[datetime] = timestamp_column()
