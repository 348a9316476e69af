"""Join the knowledge-store and inbox branches into one head.

Revision ID: 0004_single_head
Revises: 0002_knowledge_store, 0003_inbox
Create Date: 2026-11-30

Both feature areas were built on `0001_engine` independently; from here on the
history is linear again, so the next migration has one parent.
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0004_single_head"
down_revision: str | Sequence[str] | None = ("0002_knowledge_store", "0003_inbox")
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Nothing to change: a merge point only."""


def downgrade() -> None:
    """Nothing to change: a merge point only."""
