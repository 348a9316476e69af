"""An owner's deactivation NOTIFYs the operator, so their agents go off at once.

Revision ID: 0015_owner_deactivated
Revises: 0014_notifications
Create Date: 2026-12-02

A user whose `active` goes from true to false NOTIFYs `achilles_owners` (no payload:
the operator's owners pass reads every inactive owner from the rows, so one wake per
transaction is enough however many users it deactivates, and PostgreSQL folds the
identical notifications of one transaction into one). The operator's listener wakes that
pass at the sweeper's next tick instead of its period (which stays: a lost NOTIFY
delays, never loses). Whoever writes the row fires it: `achilles users upsert --inactive`
(an `INSERT ... ON CONFLICT DO UPDATE`, whose update fires UPDATE triggers) or a plain
UPDATE by whoever owns `users` (an Auth service).

Not on INSERT: a user inserted inactive owns no agent yet (an Agent naming an unknown
owner gets no row, seed 000's `OwnerMissing`), so there is nothing to switch off.
Reactivation and other columns' updates are no concern of the pass and NOTIFY nothing.

No grant: the trigger function runs as whoever updates the row (the operator's group,
the schema's owner; the API and the runners cannot update `users`, 0011), and needs
nothing but `pg_notify`, which every role may call.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015_owner_deactivated"
down_revision: str | Sequence[str] | None = "0014_notifications"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OWNERS_CHANNEL = "achilles_owners"


def upgrade() -> None:
    op.execute(
        f"""
        CREATE FUNCTION achilles_notify_owner_deactivated() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{OWNERS_CHANNEL}', '');
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER users_notify_deactivated AFTER UPDATE OF active ON users
        FOR EACH ROW WHEN (OLD.active AND NOT NEW.active)
        EXECUTE FUNCTION achilles_notify_owner_deactivated()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER users_notify_deactivated ON users")
    op.execute("DROP FUNCTION achilles_notify_owner_deactivated()")
