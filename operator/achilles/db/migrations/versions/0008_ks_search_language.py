"""Knowledge Store search matches word forms, in a language each installation chooses.

Revision ID: 0008_ks_search_language
Revises: 0007_user_key_check
Create Date: 2026-12-01

0002 indexed documents with the `simple` text search configuration, which matches
words exactly: "deploy" did not find "deployment". Now the configuration is a setting
of the installation, English (stemming) by default:

- `ks_settings` (one row at most, id 1): `text_search_config`, a PostgreSQL text search
  configuration by name (`english`, `german`, `simple`, ...). No row means English.
  Stored as text, not regconfig: pg_upgrade refuses reg* columns in user tables.
- `achilles_ks_text_search_config()`: the configuration in force, for the index and
  every query alike. The reader role may read the setting (not a user's data).
- `ks_documents.search` is no longer a generated column (its expression could not read
  a setting): a trigger fills it on insert and on a change of the title or the body,
  and `achilles ks language NAME` rebuilds it for every document.
- `ks_documents_touch_updated_at` fires only when the key, the title or the body
  change, so rebuilding the index does not make every document look edited.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_ks_search_language"
down_revision: str | Sequence[str] | None = "0007_user_key_check"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

READER_ROLE = "achilles_ks_reader"
DEFAULT_CONFIG = "english"
OLD_CONFIG = "simple"  # 0002's


def upgrade() -> None:
    op.create_table(
        "ks_settings",
        sa.Column("id", sa.SmallInteger, primary_key=True, server_default=sa.text("1")),
        sa.Column("text_search_config", sa.Text, nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_ks_settings_singleton")),
    )
    op.execute(f"GRANT SELECT ON ks_settings TO {READER_ROLE}")
    op.execute(
        f"""
        CREATE FUNCTION achilles_ks_text_search_config() RETURNS regconfig
        LANGUAGE sql STABLE PARALLEL SAFE AS $$
            SELECT COALESCE(
                (SELECT text_search_config FROM ks_settings WHERE id = 1), '{DEFAULT_CONFIG}'
            )::regconfig
        $$
        """
    )
    op.execute("ALTER TABLE ks_documents ALTER COLUMN search DROP EXPRESSION")
    op.execute(
        """
        CREATE FUNCTION achilles_ks_index_document() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            NEW.search := to_tsvector(
                achilles_ks_text_search_config(), NEW.title || ' ' || NEW.body
            );
            RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER ks_documents_index BEFORE INSERT OR UPDATE OF title, body"
        " ON ks_documents FOR EACH ROW EXECUTE FUNCTION achilles_ks_index_document()"
    )
    _touch_on("key, title, body")
    _reindex("achilles_ks_text_search_config()")


def downgrade() -> None:
    _touch_on(None)
    op.execute("DROP TRIGGER ks_documents_index ON ks_documents")
    op.execute("DROP FUNCTION achilles_ks_index_document()")
    op.execute(
        "ALTER TABLE ks_documents DROP COLUMN search, ADD COLUMN search tsvector NOT NULL"
        f" GENERATED ALWAYS AS (to_tsvector('{OLD_CONFIG}'::regconfig, title || ' ' || body))"
        " STORED"
    )
    op.create_index("ix_ks_documents_search", "ks_documents", ["search"], postgresql_using="gin")
    op.execute("DROP FUNCTION achilles_ks_text_search_config()")
    op.drop_table("ks_settings")


def _touch_on(columns: str | None) -> None:
    """`ks_documents_touch_updated_at` on updates of `columns` (None: of any column)."""
    op.execute("DROP TRIGGER ks_documents_touch_updated_at ON ks_documents")
    event = f"UPDATE OF {columns}" if columns else "UPDATE"
    op.execute(
        f"CREATE TRIGGER ks_documents_touch_updated_at BEFORE {event} ON ks_documents"
        " FOR EACH ROW EXECUTE FUNCTION achilles_touch_updated_at()"
    )


def _reindex(config: str) -> None:
    # FORCE ROW LEVEL SECURITY holds for the tables' owner too: write as maintenance.
    op.execute("SELECT set_config('achilles.ks_maintenance', 'on', true)")
    op.execute(f"UPDATE ks_documents SET search = to_tsvector({config}, title || ' ' || body)")
