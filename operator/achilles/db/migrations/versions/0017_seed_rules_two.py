"""Seed rules, round two (issue 36): spent tokens, `updated_at`, wakes, the claim as a gate.

Revision ID: 0017_seed_rules_two
Revises: 0016_search_path
Create Date: 2026-12-05

- `achilles_keep_deleted_agent_tokens` (0009) keeps the tokens of every run of a deleted
  agent, not only of the finished ones: a run still queued or running when its agent goes
  has spent what its runner reported, and seed 000 counts every token spent in the week.
  Such a run ends with its agent, so its tokens count at that instant.
- `agents_touch_updated_at` (0009, 0013) no longer counts the operator's bookkeeping in
  `meta` (`owed_spec`, `unknown_tools`) as an edit: only what the owner or an admin
  changes moves `updated_at` (seed 000: "правка промта, расписания, стопов").
- `inbox_reply_wakes`: whether a reply's wake was answered, kept per reply instead of
  derived from runs that retention deletes and that a cancel ends before they start
  (seed 003: a wake is never lost, DESIGN.md §5; nor repeated). A trigger on
  `agent_runs` writes it: a run that starts (its claim) answers the wakes of the replies
  that came before; a run that ends without starting answers those that came before it
  was created, unless it was skipped as `already_running` or cancelled before it
  started, which count as a lost wake (`skips`: the next wake's request key).
- `achilles_claim_run` is the last start gate (seed 000/002): with the run's row locked,
  a durable lock closed since the Job was made (the owner's switch, the admin's lock, no
  model, the owner missing or inactive) removes the run — a closed lock leaves no row —
  and records why in `run_start_refusals` for the operator (its Event, the refused
  request, the Job's deletion); the owner's weekly budget exhausted ends it
  `skipped/budget_exceeded` with 0 tokens, as at enqueue. Either way the runner is told
  `false` and runs nothing. `achilles_runner_run_rules` lets the claim (it runs as the
  schema's owner) write that skip; a runner's own statements still may not.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from achilles.db.function_paths import pinned_search_path

revision: str = "0017_seed_rules_two"
down_revision: str | Sequence[str] | None = "0016_search_path"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATOR = "achilles_operator"
RUNS_CHANNEL = "achilles_runs"
WAKES = "inbox_reply_wakes"
REFUSALS = "run_start_refusals"
_TS = sa.DateTime(timezone=True)

# 0013's list; `meta` without the operator's keys (db/journal/owed_spec.py,
# db/journal/catalogue.py) in place of `meta`.
BOOKKEEPING_META_KEYS = ("owed_spec", "unknown_tools")
EDITED_COLUMNS_0013 = (
    "user_id",
    "name",
    "description",
    "prompt",
    "schedule",
    "model_id",
    "enabled",
    "admin_paused",
    "meta",
    "max_run_tokens",
    "suspend_after_failures",
)


def _path() -> str:
    """Every function this revision makes pins the schema's path (0016_search_path)."""
    name = op.get_bind().execute(sa.text("SELECT current_schema()")).scalar_one()
    return pinned_search_path(str(name))


def upgrade() -> None:
    path = _path()
    _keep_tokens_of(path, "")
    _touch_when(_edited_expressions(strip_bookkeeping=True))
    _reply_wakes(path)
    _claim_gates(path)


def downgrade() -> None:
    path = _path()
    op.execute(_CLAIM_0011.format(path=path))
    op.execute(_RUNNER_RULES.format(claim_skip="", path=path))
    op.drop_table(REFUSALS)
    op.execute("DROP TRIGGER agent_runs_reply_wakes ON agent_runs")
    op.execute("DROP FUNCTION achilles_reply_wakes()")
    op.drop_table(WAKES)
    _touch_when(_edited_expressions(strip_bookkeeping=False))
    _keep_tokens_of(path, " AND finished_at IS NOT NULL")


def _keep_tokens_of(path: str, only: str) -> None:
    """0009's trigger function; `only` narrows the runs it keeps (0009: finished ones)."""
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION achilles_keep_deleted_agent_tokens() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER {path} AS $$
        BEGIN
            IF EXISTS (SELECT 1 FROM users WHERE id = OLD.user_id) THEN
                INSERT INTO deleted_agent_tokens (user_id, finished_at, tokens_used)
                SELECT OLD.user_id, coalesce(finished_at, now()), sum(tokens_used)
                FROM agent_runs
                WHERE agent_id = OLD.id AND tokens_used > 0{only}
                GROUP BY coalesce(finished_at, now());
            END IF;
            RETURN OLD;
        END
        $$
        """
    )


def _edited_expressions(*, strip_bookkeeping: bool) -> list[str]:
    """The edited columns as expressions of `{row}` (OLD or NEW)."""
    expressions = [f"{{row}}.{column}" for column in EDITED_COLUMNS_0013]
    if not strip_bookkeeping:
        return expressions
    stripped = "".join(f" - '{key}'" for key in BOOKKEEPING_META_KEYS)
    return [
        f"({{row}}.meta{stripped})" if column == "meta" else expression
        for column, expression in zip(EDITED_COLUMNS_0013, expressions, strict=True)
    ]


def _touch_when(expressions: Sequence[str]) -> None:
    """`agents_touch_updated_at` when one of `expressions` changed (OLD vs NEW)."""
    old = ", ".join(expression.format(row="OLD") for expression in expressions)
    new = ", ".join(expression.format(row="NEW") for expression in expressions)
    op.execute("DROP TRIGGER agents_touch_updated_at ON agents")
    op.execute(
        "CREATE TRIGGER agents_touch_updated_at BEFORE UPDATE ON agents FOR EACH ROW"
        f" WHEN (({old}) IS DISTINCT FROM ({new})) EXECUTE FUNCTION achilles_touch_updated_at()"
    )


def _reply_wakes(path: str) -> None:
    op.create_table(
        WAKES,
        sa.Column(
            "item_id",
            sa.BigInteger,
            sa.ForeignKey(
                "agent_inbox_items.id",
                ondelete="CASCADE",
                name="fk_inbox_reply_wakes_item_id_agent_inbox_items",
            ),
            primary_key=True,
        ),
        sa.Column("reply_serial", sa.BigInteger, nullable=False),
        sa.Column("answered_at", _TS, nullable=True),
        sa.Column("lost", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.CheckConstraint("reply_serial >= 1", name=op.f("ck_inbox_reply_wakes_serial_positive")),
        sa.CheckConstraint("lost >= 0", name=op.f("ck_inbox_reply_wakes_lost_non_negative")),
    )
    # The record is about the item's reply `reply_serial`; a newer reply starts afresh.
    op.execute(
        f"""
        CREATE FUNCTION achilles_reply_wakes() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER {path} AS $$
        DECLARE
            lost_wake boolean := (NEW.state = 'skipped' AND NEW.reason = 'already_running')
                OR (NEW.state = 'failed' AND NEW.reason = 'cancelled'
                    AND NEW.started_at IS NULL);
            cutoff timestamptz;
        BEGIN
            IF NEW.state = 'running' THEN
                cutoff := now();  -- a run that starts can take every reply before it
            ELSIF NEW.state IN ('succeeded', 'failed', 'skipped') THEN
                cutoff := NEW.created_at;
            ELSE
                RETURN NULL;
            END IF;
            IF lost_wake THEN
                INSERT INTO {WAKES} AS w (item_id, reply_serial, lost)
                SELECT i.id, i.reply_serial, 1
                FROM agent_inbox_items i
                WHERE i.agent_id = NEW.agent_id AND i.handled_at IS NOT NULL
                  AND i.outcome IS NULL AND i.handled_at <= cutoff
                ON CONFLICT (item_id) DO UPDATE
                SET lost = CASE WHEN w.reply_serial = EXCLUDED.reply_serial
                                THEN w.lost + 1 ELSE 1 END,
                    answered_at = CASE WHEN w.reply_serial = EXCLUDED.reply_serial
                                       THEN w.answered_at END,
                    reply_serial = EXCLUDED.reply_serial
                WHERE w.reply_serial <> EXCLUDED.reply_serial OR w.answered_at IS NULL;
            ELSE
                INSERT INTO {WAKES} AS w (item_id, reply_serial, answered_at)
                SELECT i.id, i.reply_serial, now()
                FROM agent_inbox_items i
                WHERE i.agent_id = NEW.agent_id AND i.handled_at IS NOT NULL
                  AND i.outcome IS NULL AND i.handled_at <= cutoff
                ON CONFLICT (item_id) DO UPDATE
                SET lost = CASE WHEN w.reply_serial = EXCLUDED.reply_serial THEN w.lost ELSE 0 END,
                    answered_at = EXCLUDED.answered_at,
                    reply_serial = EXCLUDED.reply_serial
                WHERE w.reply_serial <> EXCLUDED.reply_serial OR w.answered_at IS NULL;
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER agent_runs_reply_wakes AFTER INSERT OR UPDATE OF state ON agent_runs
        FOR EACH ROW EXECUTE FUNCTION achilles_reply_wakes()
        """
    )
    # The replies owed a wake now keep what the runs said of them so far.
    op.execute(
        f"""
        INSERT INTO {WAKES} (item_id, reply_serial, answered_at, lost)
        SELECT i.id, i.reply_serial,
               (SELECT min(r.created_at) FROM agent_runs r
                WHERE r.agent_id = i.agent_id AND r.created_at >= i.handled_at
                  AND NOT (r.state = 'skipped' AND r.reason = 'already_running')),
               (SELECT count(*) FROM agent_runs r
                WHERE r.agent_id = i.agent_id AND r.created_at >= i.handled_at
                  AND r.state = 'skipped' AND r.reason = 'already_running')
        FROM agent_inbox_items i
        WHERE i.handled_at IS NOT NULL AND i.outcome IS NULL
        """
    )
    op.execute(f"GRANT SELECT ON {WAKES} TO {OPERATOR}")


def _claim_gates(path: str) -> None:
    op.create_table(
        REFUSALS,
        sa.Column("run_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("agent_id", sa.BigInteger, nullable=False),
        sa.Column("trigger", sa.Text, nullable=False),
        sa.Column("request_key", sa.Text, nullable=True),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("admin_paused", sa.Boolean, nullable=False),
        sa.Column("has_model", sa.Boolean, nullable=False),
        sa.Column("owner_present", sa.Boolean, nullable=False),
        sa.Column("owner_active", sa.Boolean, nullable=False),
        sa.Column("created_at", _TS, nullable=False, server_default=sa.func.now()),
    )
    # FOR UPDATE SKIP LOCKED (two replicas) asks UPDATE as well.
    op.execute(f"GRANT SELECT, UPDATE, DELETE ON {REFUSALS} TO {OPERATOR}")
    op.execute(_RUNNER_RULES.format(claim_skip=_CLAIM_SKIP, path=path))
    op.execute(_CLAIM.format(path=path, refusals=REFUSALS, channel=RUNS_CHANNEL))


# The budget window of `domain/budget.py` (Sunday 00:00 in the organisation's zone; a
# midnight that does not exist is the first instant after it, as PostgreSQL reads it).
_CLAIM = """
CREATE OR REPLACE FUNCTION achilles_claim_run(run bigint, at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER {path} AS $$
DECLARE
    found_state text;
    found_hash bytea;
    found_agent bigint;
    found_trigger text;
    found_request text;
    owner bigint;
    is_enabled boolean;
    is_paused boolean;
    has_model boolean;
    owner_active boolean;
    zone text;
    budget bigint;
    sunday date;
    week_start timestamptz;
    week_end timestamptz;
    used bigint;
BEGIN
    SELECT r.state, r.runner_secret_hash, r.agent_id, r.trigger, r.request_key
    INTO found_state, found_hash, found_agent, found_trigger, found_request
    FROM agent_runs r WHERE r.id = run FOR UPDATE;
    IF NOT FOUND OR found_state <> 'queued' THEN
        RETURN false;
    END IF;
    IF achilles_session_is_runner() AND (
        run IS DISTINCT FROM NULLIF(current_setting('achilles.run_id', true), '')::bigint
        OR found_hash IS NULL
        OR found_hash IS DISTINCT FROM achilles_run_secret_hash()
    ) THEN
        RAISE EXCEPTION 'run %: this session does not hold the run''s secret', run
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'a runner claims only the run its Job names (ACHILLES_RUN_SECRET)';
    END IF;
    -- The durable locks, as they stand now: a closed one leaves no row (seed 000).
    SELECT a.user_id, a.enabled, a.admin_paused, a.model_id IS NOT NULL, u.active
    INTO owner, is_enabled, is_paused, has_model, owner_active
    FROM agents a LEFT JOIN users u ON u.id = a.user_id WHERE a.id = found_agent;
    IF NOT is_enabled OR is_paused OR NOT has_model OR owner_active IS NOT TRUE THEN
        INSERT INTO {refusals} (run_id, agent_id, trigger, request_key, enabled, admin_paused,
                                has_model, owner_present, owner_active)
        VALUES (run, found_agent, found_trigger, found_request, is_enabled, is_paused,
                has_model, owner_active IS NOT NULL, coalesce(owner_active, false))
        ON CONFLICT (run_id) DO NOTHING;
        DELETE FROM agent_runs WHERE id = run;
        PERFORM pg_notify('{channel}', found_agent::text);
        RETURN false;
    END IF;
    -- The weekly budget, read at the start (seed 000).
    SELECT s.timezone, s.agent_weekly_token_budget INTO zone, budget
    FROM platform_settings s WHERE s.id = 1;
    sunday := (coalesce(at, now()) AT TIME ZONE zone)::date;
    sunday := sunday - (extract(isodow FROM sunday)::int % 7);
    week_start := sunday::timestamp AT TIME ZONE zone;
    week_end := (sunday + 7)::timestamp AT TIME ZONE zone;
    SELECT coalesce((SELECT sum(r.tokens_used) FROM agent_runs r JOIN agents a ON a.id = r.agent_id
                     WHERE a.user_id = owner
                       AND r.finished_at >= week_start AND r.finished_at < week_end), 0)
         + coalesce((SELECT sum(d.tokens_used) FROM deleted_agent_tokens d
                     WHERE d.user_id = owner
                       AND d.finished_at >= week_start AND d.finished_at < week_end), 0)
    INTO used;
    IF used >= budget THEN
        UPDATE agent_runs
        SET state = 'skipped', reason = 'budget_exceeded', tokens_used = 0,
            finished_at = coalesce(at, now())
        WHERE id = run;
        RETURN false;
    END IF;
    UPDATE agent_runs
    SET state = 'running', started_at = coalesce(at, now()),
        heartbeat_at = coalesce(at, now())
    WHERE id = run;
    RETURN true;
END
$$
"""

_CLAIM_0011 = """
CREATE OR REPLACE FUNCTION achilles_claim_run(run bigint, at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER {path} AS $$
DECLARE
    found_state text;
    found_hash bytea;
BEGIN
    SELECT state, runner_secret_hash INTO found_state, found_hash
    FROM agent_runs WHERE id = run FOR UPDATE;
    IF NOT FOUND OR found_state <> 'queued' THEN
        RETURN false;
    END IF;
    IF achilles_session_is_runner() AND (
        run IS DISTINCT FROM NULLIF(current_setting('achilles.run_id', true), '')::bigint
        OR found_hash IS NULL
        OR found_hash IS DISTINCT FROM achilles_run_secret_hash()
    ) THEN
        RAISE EXCEPTION 'run %: this session does not hold the run''s secret', run
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'a runner claims only the run its Job names (ACHILLES_RUN_SECRET)';
    END IF;
    UPDATE agent_runs
    SET state = 'running', started_at = coalesce(at, now()),
        heartbeat_at = coalesce(at, now())
    WHERE id = run;
    RETURN true;
END
$$
"""

# The claim's budget skip, written as the table's owner (the claim is SECURITY DEFINER);
# a runner's own statement runs as the runner and still may not move its run so.
_CLAIM_SKIP = """
    IF OLD.state = 'queued' AND NEW.state = 'skipped' AND NEW.reason = 'budget_exceeded'
       AND NEW.tokens_used = 0
       AND current_user = (SELECT pg_get_userbyid(c.relowner) FROM pg_class c
                           WHERE c.oid = TG_RELID) THEN
        RETURN NEW;
    END IF;"""

# 0011's `achilles_runner_run_rules`, with `{claim_skip}` first.
_RUNNER_RULES = """
CREATE OR REPLACE FUNCTION achilles_runner_run_rules() RETURNS trigger
LANGUAGE plpgsql {path} AS $$
BEGIN{claim_skip}
    IF OLD.state = 'queued' AND NEW.state = 'running' THEN
        NEW.started_at := now();
        NEW.heartbeat_at := now();
        NEW.tokens_used := OLD.tokens_used;
    ELSIF OLD.state = 'running' AND NEW.state IN ('running', 'succeeded', 'failed') THEN
        IF NEW.tokens_used < OLD.tokens_used THEN
            RAISE EXCEPTION 'run %: a runner only adds tokens (% -> %)',
                OLD.id, OLD.tokens_used, NEW.tokens_used
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF NEW.started_at IS DISTINCT FROM OLD.started_at THEN
            RAISE EXCEPTION 'run %: a runner does not move its start', OLD.id
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF NEW.heartbeat_at IS DISTINCT FROM OLD.heartbeat_at THEN
            NEW.heartbeat_at := now();
        END IF;
        IF NEW.state = 'running' THEN
            IF ROW(NEW.output, NEW.error, NEW.reason, NEW.finished_at)
               IS DISTINCT FROM ROW(OLD.output, OLD.error, OLD.reason, OLD.finished_at)
            THEN
                RAISE EXCEPTION 'run %: an outcome comes with the end of the run', OLD.id
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
        ELSE
            NEW.finished_at := now();
        END IF;
    ELSE
        RAISE EXCEPTION 'run %: a runner may not move its run from % to %',
            OLD.id, OLD.state, NEW.state
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$
"""
