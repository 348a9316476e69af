"""Controls owners and admins expect, the owner's side (issue 22): budget warnings, the
notification outbox, journal retention.

Revision ID: 0014_notifications
Revises: 0013_run_controls
Create Date: 2026-12-02

- `platform_settings.agent_webhook_*`: where notifications go (the AgentPlatform's
  `notifications`): the receiver's URL and the Secret (in the runs namespace) holding the
  signing secret. No URL: nothing is written to the outbox.
- `platform_settings.agent_run_retention_days`: finished runs older than this many days
  (and older than the current budget week) are deleted by the operator. NULL keeps
  every run (the default).
- `notification_outbox`: one row per notification, inserted in the transaction of the
  change it announces, so a change that rolls back announces nothing and one that
  commits is announced. `achilles_enqueue_notification()` builds the row (the agent's
  and owner's names as they are at that moment); triggers call it for a run that ends
  `failed` or `skipped`, an inbox item that becomes `blocked` and an agent suspended
  (0013's `suspended_at` set), whoever writes them (operator, runner, API); the
  operator's budget-warnings pass calls it for a crossed threshold. An insert NOTIFYs
  `achilles_notifications` (the notifier wakes).
  `delivery_id` is the receiver's idempotency key: the same on every attempt.
- `budget_warnings`: the thresholds an owner's weekly tokens crossed, one row per
  (owner, budget week, threshold): the key makes the warning once per threshold per week,
  whichever replica's pass sees it first.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB, UUID

from achilles.db import checks

revision: str = "0014_notifications"
down_revision: str | Sequence[str] | None = "0013_run_controls"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATOR = "achilles_operator"
OUTBOX = "notification_outbox"
WARNINGS = "budget_warnings"
NOTIFICATIONS_CHANNEL = "achilles_notifications"
_TS = sa.DateTime(timezone=True)
_SEARCH_PATH = "SET search_path = pg_catalog, {schema}"


def _schema() -> str:
    name = op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one()
    return str(name)


def _settings() -> None:
    for name in ("agent_webhook_url", "agent_webhook_secret_name", "agent_webhook_secret_key"):
        op.add_column("platform_settings", sa.Column(name, sa.Text, nullable=True))
    op.add_column(
        "platform_settings", sa.Column("agent_run_retention_days", sa.Integer, nullable=True)
    )
    op.create_check_constraint(
        op.f("ck_platform_settings_retention_positive"),
        "platform_settings",
        "agent_run_retention_days IS NULL OR agent_run_retention_days >= 1",
    )
    op.create_check_constraint(
        op.f("ck_platform_settings_webhook_secret_with_url"),
        "platform_settings",
        "agent_webhook_url IS NOT NULL"
        " OR (agent_webhook_secret_name IS NULL AND agent_webhook_secret_key IS NULL)",
    )


def _outbox() -> None:
    op.create_table(
        OUTBOX,
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column(
            "delivery_id",
            UUID(as_uuid=True),
            nullable=False,
            server_default=sa.text("gen_random_uuid()"),
        ),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("state", sa.Text, nullable=False, server_default=sa.text("'pending'")),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("next_attempt_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.Column("delivered_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_outbox")),
        sa.UniqueConstraint("delivery_id", name=op.f("uq_notification_outbox_delivery_id")),
        sa.CheckConstraint(
            checks.NOTIFICATION_KIND_CHECK, name=op.f("ck_notification_outbox_kind")
        ),
        sa.CheckConstraint(checks.DELIVERY_STATE_CHECK, name=op.f("ck_notification_outbox_state")),
        sa.CheckConstraint(
            checks.DELIVERED_WHEN_DONE_CHECK, name=op.f("ck_notification_outbox_delivered_at")
        ),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_notification_outbox_attempts")),
    )
    # The notifier's claim: the pending rows by due time.
    op.create_index(
        "ix_notification_outbox_due",
        OUTBOX,
        ["next_attempt_at", "id"],
        postgresql_where=sa.text(checks.PENDING_DELIVERY_PREDICATE),
    )
    op.create_index("ix_notification_outbox_created_at", OUTBOX, ["created_at"])
    op.execute(
        f"""
        CREATE FUNCTION achilles_outbox_notify() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{NOTIFICATIONS_CHANNEL}', '');
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        f"""
        CREATE TRIGGER notification_outbox_notify AFTER INSERT ON {OUTBOX}
        FOR EACH STATEMENT EXECUTE FUNCTION achilles_outbox_notify()
        """
    )


def _warnings() -> None:
    op.create_table(
        WARNINGS,
        sa.Column(
            "user_id",
            sa.BigInteger,
            sa.ForeignKey("users.id", ondelete="CASCADE", name="fk_budget_warnings_user_id_users"),
            nullable=False,
        ),
        sa.Column("window_start", _TS, nullable=False),
        sa.Column("threshold", sa.SmallInteger, nullable=False),
        sa.Column("used", sa.BigInteger, nullable=False),
        sa.Column("budget", sa.BigInteger, nullable=False),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint(
            "user_id", "window_start", "threshold", name=op.f("pk_budget_warnings")
        ),
        sa.CheckConstraint(
            checks.BUDGET_THRESHOLD_CHECK, name=op.f("ck_budget_warnings_threshold")
        ),
    )
    op.create_index("ix_budget_warnings_window_start", WARNINGS, ["window_start"])


def _enqueue_function(schema: str) -> None:
    path = _SEARCH_PATH.format(schema=schema)
    # SECURITY DEFINER: a runner's or the API's session writes the row through its
    # trigger without any grant on the outbox, and the names are read past their
    # row-level policies.
    op.execute(
        f"""
        CREATE FUNCTION achilles_enqueue_notification(
            kind text, owner bigint, agent bigint, details jsonb
        ) RETURNS void
        LANGUAGE plpgsql VOLATILE SECURITY DEFINER {path} AS $$
        DECLARE
            agent_doc jsonb;
            owner_key text;
        BEGIN
            IF NOT EXISTS (
                SELECT FROM platform_settings WHERE id = 1 AND agent_webhook_url IS NOT NULL
            ) THEN
                RETURN;
            END IF;
            IF agent IS NOT NULL THEN
                SELECT jsonb_build_object(
                           'id', a.id, 'name', a.name,
                           'namespace', a.cr_namespace, 'resource', a.cr_name),
                       a.user_id
                  INTO agent_doc, owner
                FROM agents a WHERE a.id = agent;
            END IF;
            SELECT u.key INTO owner_key FROM users u WHERE u.id = owner;
            INSERT INTO {OUTBOX} (kind, payload)
            VALUES (kind, jsonb_build_object('owner', owner_key, 'agent', agent_doc)
                          || coalesce(details, '{{}}'::jsonb));
        END $$
        """
    )
    op.execute(
        "REVOKE ALL ON FUNCTION achilles_enqueue_notification(text, bigint, bigint, jsonb)"
        " FROM PUBLIC"
    )
    op.execute(
        "GRANT EXECUTE ON FUNCTION achilles_enqueue_notification(text, bigint, bigint, jsonb)"
        f" TO {OPERATOR}"
    )


def _triggers(schema: str) -> None:
    path = _SEARCH_PATH.format(schema=schema)
    op.execute(
        f"""
        CREATE FUNCTION achilles_notify_run_ended() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER {path} AS $$
        BEGIN
            PERFORM achilles_enqueue_notification(
                'run.' || NEW.state, NULL, NEW.agent_id,
                jsonb_build_object('run', jsonb_build_object(
                    'id', NEW.id, 'trigger', NEW.trigger, 'state', NEW.state,
                    'reason', NEW.reason, 'tokensUsed', NEW.tokens_used,
                    'finishedAt', NEW.finished_at)));
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_runs_notify_insert AFTER INSERT ON agent_runs
        FOR EACH ROW WHEN (NEW.state IN ('failed', 'skipped'))
        EXECUTE FUNCTION achilles_notify_run_ended()
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_runs_notify_update AFTER UPDATE OF state ON agent_runs
        FOR EACH ROW WHEN (NEW.state IN ('failed', 'skipped') AND OLD.state <> NEW.state)
        EXECUTE FUNCTION achilles_notify_run_ended()
        """
    )
    # The suspension (0013's `agents.suspended_at`) is announced by the transaction that
    # sets it, whichever code path does.
    op.execute(
        f"""
        CREATE FUNCTION achilles_notify_agent_suspended() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER {path} AS $$
        BEGIN
            PERFORM achilles_enqueue_notification(
                'agent.suspended', NULL, NEW.id,
                jsonb_build_object('suspension', jsonb_build_object(
                    'suspendedAt', NEW.suspended_at,
                    'afterFailures', coalesce(
                        NEW.suspend_after_failures,
                        (SELECT agent_suspend_after_failures FROM platform_settings
                         WHERE id = 1)))));
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agents_notify_suspended AFTER UPDATE OF suspended_at ON agents
        FOR EACH ROW WHEN (OLD.suspended_at IS NULL AND NEW.suspended_at IS NOT NULL)
        EXECUTE FUNCTION achilles_notify_agent_suspended()
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION achilles_notify_item_blocked() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER {path} AS $$
        BEGIN
            PERFORM achilles_enqueue_notification(
                'inbox.item_blocked', NULL, NEW.agent_id,
                jsonb_build_object('item', jsonb_build_object(
                    'id', NEW.id, 'key', NEW.key, 'revision', NEW.revision)));
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_inbox_items_notify_insert AFTER INSERT ON agent_inbox_items
        FOR EACH ROW WHEN (NEW.state = 'blocked')
        EXECUTE FUNCTION achilles_notify_item_blocked()
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_inbox_items_notify_update AFTER UPDATE OF state
        ON agent_inbox_items
        FOR EACH ROW WHEN (NEW.state = 'blocked' AND OLD.state <> 'blocked')
        EXECUTE FUNCTION achilles_notify_item_blocked()
        """
    )


def _grants() -> None:
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {OUTBOX}, {WARNINGS} TO {OPERATOR}")
    op.execute(
        f"DO $$ BEGIN EXECUTE format('GRANT USAGE ON SEQUENCE %s TO {OPERATOR}',"
        f" pg_get_serial_sequence('{OUTBOX}', 'id')); END $$"
    )


def upgrade() -> None:
    schema = _schema()
    _settings()
    _outbox()
    _warnings()
    _enqueue_function(schema)
    _triggers(schema)
    _grants()


def downgrade() -> None:
    op.execute("DROP TRIGGER agent_inbox_items_notify_update ON agent_inbox_items")
    op.execute("DROP TRIGGER agent_inbox_items_notify_insert ON agent_inbox_items")
    op.execute("DROP TRIGGER agent_runs_notify_update ON agent_runs")
    op.execute("DROP TRIGGER agent_runs_notify_insert ON agent_runs")
    op.execute("DROP TRIGGER agents_notify_suspended ON agents")
    op.execute("DROP FUNCTION achilles_notify_agent_suspended()")
    op.execute("DROP FUNCTION achilles_notify_item_blocked()")
    op.execute("DROP FUNCTION achilles_notify_run_ended()")
    op.execute("DROP FUNCTION achilles_enqueue_notification(text, bigint, bigint, jsonb)")
    op.drop_table(WARNINGS)
    op.drop_table(OUTBOX)
    op.execute("DROP FUNCTION achilles_outbox_notify()")
    op.drop_constraint(
        op.f("ck_platform_settings_webhook_secret_with_url"), "platform_settings", type_="check"
    )
    op.drop_constraint(
        op.f("ck_platform_settings_retention_positive"), "platform_settings", type_="check"
    )
    op.drop_column("platform_settings", "agent_run_retention_days")
    for name in ("agent_webhook_secret_key", "agent_webhook_secret_name", "agent_webhook_url"):
        op.drop_column("platform_settings", name)
