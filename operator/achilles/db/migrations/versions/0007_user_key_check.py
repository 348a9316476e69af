"""A user key is what an Agent can name as its owner.

Revision ID: 0007_user_key_check
Revises: 0006_journal_indexes
Create Date: 2026-12-01

`users.key` gets the CRD's pattern for `spec.owner` (`achilles.domain.users`) as a
CHECK, so no way of writing a user (the CLI, the Knowledge Store loader, SQL) can create
one that no Agent could ever name. Rows written before this check are not rewritten:
the constraint is added NOT VALID (it holds for every new or changed row) and validated
at once when no existing key breaks it, which is every database this release wrote.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from achilles.db.checks import USER_KEY_CHECK

revision: str = "0007_user_key_check"
down_revision: str | Sequence[str] | None = "0006_journal_indexes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CONSTRAINT = "ck_users_key_format"


def upgrade() -> None:
    op.execute(f"ALTER TABLE users ADD CONSTRAINT {CONSTRAINT} CHECK ({USER_KEY_CHECK}) NOT VALID")
    op.execute(
        f"""
        DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM users WHERE NOT ({USER_KEY_CHECK})) THEN
                ALTER TABLE users VALIDATE CONSTRAINT {CONSTRAINT};
            END IF;
        END $$
        """
    )


def downgrade() -> None:
    op.execute(f"ALTER TABLE users DROP CONSTRAINT {CONSTRAINT}")
