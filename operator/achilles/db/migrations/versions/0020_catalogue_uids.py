"""Catalogue rows know which object they mirror (issue 36 item 8).

Revision ID: 0020_catalogue_uids
Revises: 0019_cancel_holds_the_run
Create Date: 2026-12-05

`agent_models` and `tools` were keyed by name alone, so an AgentModel deleted and
created again under its name while no operator watched looked like the same model, and
its agents carried on with a model an admin had withdrawn (seed 000: a withdrawn model
stops its agents; re-adding it revives nobody). Each row now keeps the uid of the
cluster object it mirrors (`cr_uid`; NULL for rows made in the database, and for rows
mirrored before this revision until their next event): an object of the same name with
another uid is a new object, and the old one's deletion is applied first. No grant
changes: the operator writes the column through its table grants.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020_catalogue_uids"
down_revision: str | Sequence[str] | None = "0019_cancel_holds_the_run"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("agent_models", "tools")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("cr_uid", sa.Text, nullable=True))


def downgrade() -> None:
    for table in TABLES:
        op.drop_column(table, "cr_uid")
