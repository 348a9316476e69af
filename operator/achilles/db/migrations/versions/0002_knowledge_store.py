"""Knowledge Store reference schema: documents, per-user/group access, links, row-level security.

Revision ID: 0002_knowledge_store
Revises: 0001_engine
Create Date: 2026-11-30

The real Knowledge Store is a neighbour service; this schema is its stand-in for
standalone installs, demos and tests. What matters is the access model: agents
read KS strictly under their owner's rights, and the database enforces it.

- Every KS table has `ENABLE` + `FORCE ROW LEVEL SECURITY`.
- Read policies are keyed on `achilles_ks_user_id()`, i.e. the transaction-local
  setting `achilles.ks_user_id`; unset or empty means "nobody": no rows.
- `achilles_ks_reader` is a NOLOGIN role without BYPASSRLS and with SELECT only.
  Every KS read transaction does `SET LOCAL ROLE achilles_ks_reader` and
  `set_config('achilles.ks_user_id', <owner>, true)`, so the policies bite even
  when the connection's login is the schema owner or a superuser.
- Writes (the demo loader) go through the `*_maintain` policies, which hold only
  in a transaction that set `achilles.ks_maintenance = 'on'` and never for the
  reader role; the writer also needs ordinary table privileges (the owner has them).

The role is cluster-wide and may serve several databases, so it is created if
missing and never dropped by a downgrade (its grants here are dropped with the tables).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import TSVECTOR

revision: str = "0002_knowledge_store"
down_revision: str | Sequence[str] | None = "0001_engine"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

READER_ROLE = "achilles_ks_reader"
KS_TABLES = ("ks_documents", "ks_groups", "ks_group_members", "ks_document_access", "ks_links")
# Language-neutral full-text configuration: the organisation may write in any language.
TEXT_SEARCH_CONFIG = "simple"

_TS = sa.DateTime(timezone=True)


def _created_at() -> sa.Column[datetime]:
    return sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now())


def _create_tables() -> None:
    op.create_table(
        "ks_documents",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        # Stable external key: what loaders and links refer to, so re-loading updates in place.
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column(
            "search",
            TSVECTOR,
            sa.Computed(
                f"to_tsvector('{TEXT_SEARCH_CONFIG}'::regconfig, title || ' ' || body)",
                persisted=True,
            ),
            nullable=False,
        ),
        _created_at(),
        sa.Column("updated_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.UniqueConstraint("key", name="uq_ks_documents_key"),
    )
    op.create_index("ix_ks_documents_search", "ks_documents", ["search"], postgresql_using="gin")
    op.create_table(
        "ks_groups",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        _created_at(),
        sa.UniqueConstraint("name", name="uq_ks_groups_name"),
    )
    op.create_table(
        "ks_group_members",
        sa.Column(
            "group_id",
            sa.BigInteger,
            sa.ForeignKey(
                "ks_groups.id", ondelete="CASCADE", name="fk_ks_group_members_group_id_ks_groups"
            ),
            primary_key=True,
        ),
        sa.Column(
            "user_id",
            sa.BigInteger,
            sa.ForeignKey("users.id", ondelete="CASCADE", name="fk_ks_group_members_user_id_users"),
            primary_key=True,
        ),
    )
    op.create_index("ix_ks_group_members_user_id", "ks_group_members", ["user_id"])
    op.create_table(
        "ks_document_access",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column(
            "document_id",
            sa.BigInteger,
            sa.ForeignKey(
                "ks_documents.id",
                ondelete="CASCADE",
                name="fk_ks_document_access_document_id_ks_documents",
            ),
            nullable=False,
        ),
        sa.Column(
            "user_id",
            sa.BigInteger,
            sa.ForeignKey(
                "users.id", ondelete="CASCADE", name="fk_ks_document_access_user_id_users"
            ),
        ),
        sa.Column(
            "group_id",
            sa.BigInteger,
            sa.ForeignKey(
                "ks_groups.id", ondelete="CASCADE", name="fk_ks_document_access_group_id_ks_groups"
            ),
        ),
        # A grant names exactly one grantee: a user or a group.
        sa.CheckConstraint(
            "num_nonnulls(user_id, group_id) = 1", name=op.f("ck_ks_document_access_one_grantee")
        ),
    )
    op.create_index("ix_ks_document_access_document_id", "ks_document_access", ["document_id"])
    op.create_index(
        "uq_ks_document_access_user",
        "ks_document_access",
        ["user_id", "document_id"],
        unique=True,
        postgresql_where=sa.text("user_id IS NOT NULL"),
    )
    op.create_index(
        "uq_ks_document_access_group",
        "ks_document_access",
        ["group_id", "document_id"],
        unique=True,
        postgresql_where=sa.text("group_id IS NOT NULL"),
    )
    op.create_table(
        "ks_links",
        sa.Column(
            "from_document_id",
            sa.BigInteger,
            sa.ForeignKey(
                "ks_documents.id",
                ondelete="CASCADE",
                name="fk_ks_links_from_document_id_ks_documents",
            ),
            primary_key=True,
        ),
        sa.Column(
            "to_document_id",
            sa.BigInteger,
            sa.ForeignKey(
                "ks_documents.id",
                ondelete="CASCADE",
                name="fk_ks_links_to_document_id_ks_documents",
            ),
            primary_key=True,
        ),
        sa.Column("relation", sa.Text, primary_key=True, server_default=sa.text("'related'")),
        _created_at(),
        sa.CheckConstraint("from_document_id <> to_document_id", name=op.f("ck_ks_links_not_self")),
    )
    op.create_index("ix_ks_links_to_document_id", "ks_links", ["to_document_id"])


# Read policies. They reference each other's tables through subqueries, which are
# themselves filtered by RLS for the current role: a user sees only their own
# memberships, hence only grants to themselves or their groups, hence only those
# documents, hence only links whose both ends are visible.
_READ_POLICIES = {
    "ks_group_members": "user_id = achilles_ks_user_id()",
    "ks_groups": "id IN (SELECT m.group_id FROM ks_group_members m)",
    "ks_document_access": (
        "user_id = achilles_ks_user_id() OR group_id IN (SELECT m.group_id FROM ks_group_members m)"
    ),
    "ks_documents": (
        "EXISTS (SELECT 1 FROM ks_document_access a WHERE a.document_id = ks_documents.id)"
    ),
    "ks_links": (
        "EXISTS (SELECT 1 FROM ks_documents d WHERE d.id = ks_links.from_document_id)"
        " AND EXISTS (SELECT 1 FROM ks_documents d WHERE d.id = ks_links.to_document_id)"
    ),
}

_MAINTENANCE = (
    f"current_user <> '{READER_ROLE}'"
    " AND coalesce(current_setting('achilles.ks_maintenance', true), '') = 'on'"
)


def _create_access_control() -> None:
    # The owner whose rights a transaction reads under; NULL (sees nothing) when unset.
    op.execute(
        """
        CREATE FUNCTION achilles_ks_user_id() RETURNS bigint
        LANGUAGE sql STABLE PARALLEL SAFE AS $$
            SELECT NULLIF(current_setting('achilles.ks_user_id', true), '')::bigint
        $$
        """
    )
    # CREATE ROLE has no IF NOT EXISTS; another database of the cluster (or a
    # concurrent migration) may have created it already.
    op.execute(
        f"""
        DO $$
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{READER_ROLE}') THEN
                CREATE ROLE {READER_ROLE} NOLOGIN NOSUPERUSER NOBYPASSRLS;
            END IF;
        EXCEPTION WHEN duplicate_object THEN
            NULL;
        END
        $$
        """
    )
    op.execute(
        f"DO $$ BEGIN EXECUTE format('GRANT USAGE ON SCHEMA %I TO {READER_ROLE}',"
        " current_schema()); END $$"
    )
    for table in KS_TABLES:
        op.execute(f"GRANT SELECT ON {table} TO {READER_ROLE}")
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY {table}_read ON {table} FOR SELECT USING ({_READ_POLICIES[table]})"
        )
        op.execute(
            f"CREATE POLICY {table}_maintain ON {table} FOR ALL"
            f" USING ({_MAINTENANCE}) WITH CHECK ({_MAINTENANCE})"
        )
    op.execute(
        "CREATE TRIGGER ks_documents_touch_updated_at BEFORE UPDATE ON ks_documents"
        " FOR EACH ROW EXECUTE FUNCTION achilles_touch_updated_at()"
    )


def upgrade() -> None:
    _create_tables()
    _create_access_control()


def downgrade() -> None:
    # Policies reference other KS tables, so they go before any table does.
    for table in KS_TABLES:
        op.execute(f"DROP POLICY {table}_read ON {table}")
        op.execute(f"DROP POLICY {table}_maintain ON {table}")
    for table in reversed(KS_TABLES):
        op.drop_table(table)
    op.execute("DROP FUNCTION achilles_ks_user_id()")
    op.execute(
        f"DO $$ BEGIN EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM {READER_ROLE}',"
        " current_schema()); END $$"
    )
