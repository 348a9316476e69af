"""Every run leaves a trace: its steps, and what it used (issue 21).

Revision ID: 0012_run_steps
Revises: 0011_least_privilege
Create Date: 2026-12-02

- `agent_run_steps`: a run's model calls, tool calls and inbox asks as they happened
  (`domain/run_trace.py`): numbered from 1 per run, at most 200 and then one
  `truncated` marker (a CHECK holds the numbers to that), times, latency, tokens and
  sizes, never the owner's documents, prompts or tool results. Deleted with the run.
  Its runner inserts them, only while the run is its session's run (`achilles_run_id()`
  of 0011: queued or running, secret held), so nothing is written after the run ended;
  it cannot read, change or delete them. The operator and the API read every row (the
  API scopes to the owner itself, as for runs).
- `agent_runs.used_*`: what the run used, written by its runner at start: the model's
  name, the endpoint's host and provider model id, the composed prompt's SHA-256, the
  tool names offered. A runner writes them once (a trigger refuses a second, different
  record), and like its other writes only while the run is running.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

from achilles.db import checks

revision: str = "0012_run_steps"
down_revision: str | Sequence[str] | None = "0011_least_privilege"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATOR = "achilles_operator"
RUNNER = "achilles_runner"
API = "achilles_api"
STEPS = "agent_run_steps"
USED_COLUMNS = (
    "used_model",
    "used_endpoint_host",
    "used_provider_model",
    "used_prompt_sha256",
    "used_tools",
)
_TS = sa.DateTime(timezone=True)


def _used_columns() -> None:
    for name in ("used_model", "used_endpoint_host", "used_provider_model"):
        op.add_column("agent_runs", sa.Column(name, sa.Text, nullable=True))
    op.add_column("agent_runs", sa.Column("used_prompt_sha256", sa.LargeBinary, nullable=True))
    op.add_column("agent_runs", sa.Column("used_tools", ARRAY(sa.Text), nullable=True))
    op.create_check_constraint(
        op.f("ck_agent_runs_used_prompt_sha256_length"),
        "agent_runs",
        checks.RUN_USED_PROMPT_SHA256_CHECK,
    )
    columns = ", ".join(USED_COLUMNS)
    op.execute(
        f"""
        CREATE FUNCTION achilles_runner_used_once() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF OLD.used_model IS NOT NULL
               AND ROW({", ".join(f"NEW.{c}" for c in USED_COLUMNS)})
                   IS DISTINCT FROM ROW({", ".join(f"OLD.{c}" for c in USED_COLUMNS)})
            THEN
                RAISE EXCEPTION 'run %: what a run used is recorded once, at its start', OLD.id
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        f"""
        CREATE TRIGGER agent_runs_runner_used_once BEFORE UPDATE OF {columns} ON agent_runs
        FOR EACH ROW WHEN (achilles_session_is_runner())
        EXECUTE FUNCTION achilles_runner_used_once()
        """
    )
    op.execute(f"GRANT UPDATE ({columns}) ON agent_runs TO {RUNNER}")


def _steps() -> None:
    op.create_table(
        STEPS,
        sa.Column("run_id", sa.BigInteger, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("ended_at", _TS, nullable=False),
        sa.Column("latency_ms", sa.Double, nullable=False),
        sa.Column("model", sa.Text, nullable=True),
        sa.Column("input_tokens", sa.BigInteger, nullable=True),
        sa.Column("output_tokens", sa.BigInteger, nullable=True),
        sa.Column("finish_reason", sa.Text, nullable=True),
        sa.Column("tool", sa.Text, nullable=True),
        sa.Column("status", sa.Text, nullable=True),
        sa.Column("argument_bytes", sa.Integer, nullable=True),
        sa.Column("result_bytes", sa.Integer, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_agent_run_steps")),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["agent_runs.id"],
            name=op.f("fk_agent_run_steps_run_id_agent_runs"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(checks.STEP_KIND_CHECK, name=op.f("ck_agent_run_steps_kind")),
        sa.CheckConstraint(checks.STEP_TOOL_STATUS_CHECK, name=op.f("ck_agent_run_steps_status")),
        sa.CheckConstraint(checks.STEP_SEQ_CHECK, name=op.f("ck_agent_run_steps_seq_range")),
        sa.CheckConstraint(
            checks.STEP_TRUNCATED_LAST_CHECK, name=op.f("ck_agent_run_steps_truncated_last")
        ),
        sa.CheckConstraint(
            checks.STEP_FIELDS_MATCH_KIND_CHECK, name=op.f("ck_agent_run_steps_fields_match_kind")
        ),
        sa.CheckConstraint(
            checks.STEP_COUNTS_NON_NEGATIVE_CHECK,
            name=op.f("ck_agent_run_steps_counts_non_negative"),
        ),
    )
    op.execute(f"GRANT SELECT ON {STEPS} TO {OPERATOR}, {API}")
    op.execute(f"GRANT INSERT ON {STEPS} TO {RUNNER}")
    op.execute(f"ALTER TABLE {STEPS} ENABLE ROW LEVEL SECURITY")
    for role in (OPERATOR, API):
        op.execute(
            f"CREATE POLICY {STEPS}_{role.removeprefix('achilles_')} ON {STEPS}"
            f" TO {role} USING (true) WITH CHECK (true)"
        )
    op.execute(
        f"CREATE POLICY {STEPS}_runner ON {STEPS} TO {RUNNER}"
        " USING (run_id = achilles_run_id()) WITH CHECK (run_id = achilles_run_id())"
    )


def upgrade() -> None:
    _used_columns()
    _steps()


def downgrade() -> None:
    op.drop_table(STEPS)
    op.execute(f"REVOKE UPDATE ({', '.join(USED_COLUMNS)}) ON agent_runs FROM {RUNNER}")
    op.execute("DROP TRIGGER agent_runs_runner_used_once ON agent_runs")
    op.execute("DROP FUNCTION achilles_runner_used_once()")
    op.drop_constraint(op.f("ck_agent_runs_used_prompt_sha256_length"), "agent_runs")
    for name in reversed(USED_COLUMNS):
        op.drop_column("agent_runs", name)
