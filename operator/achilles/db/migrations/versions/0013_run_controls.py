"""Controls owners and admins expect, the run's side (issue 22): cancel, per-run token cap,
auto-suspend.

Revision ID: 0013_run_controls
Revises: 0012_run_steps
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0013_run_controls"
down_revision: str | Sequence[str] | None = "0012_run_steps"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
