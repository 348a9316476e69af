"""Controls owners and admins expect, the owner's side (issue 22): budget warnings, the
notification outbox, journal retention.

Revision ID: 0014_notifications
Revises: 0013_run_controls
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0014_notifications"
down_revision: str | Sequence[str] | None = "0013_run_controls"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
