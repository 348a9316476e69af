"""AgentTools from MCP servers, and the owner's approval of their calls (issue 38).

Revision ID: 0018_mcp_tools
Revises: 0017_seed_rules_two
Create Date: 2026-12-05

- `tool_mcp_sources`: an AgentTool's MCP server (`implementation: mcp`), one row per
  `tools` row and gone with it: URL, the Secret keys of its headers (never a value), the
  admin's rules (allowlist, approval policies, timeout, result cap) and the operator's
  last listing of the server's tools (`domain/mcp_tools.py`). A runner reads the rows of
  its agent's tools only.
- `tool_approvals`: a call waiting for its owner, one per inbox item; the arguments are
  what is executed. State changes are guarded UPDATEs (`db/tools/approvals.py`); the
  partial unique index keeps one open approval per call. A runner reads and writes its
  agent's rows only.
- `agent_run_steps.argument_sha256`: the SHA-256 of a tool call's canonical arguments
  (an MCP call's), what the journal keeps of them besides their size.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from achilles.db.tools.models import (
    APPROVAL_STATE_CHECK,
    MCP_APPROVAL_CHECK,
    MCP_CREDENTIALS_CHECK,
    OPEN_APPROVAL_PREDICATE,
)

revision: str = "0018_mcp_tools"
down_revision: str | Sequence[str] | None = "0017_seed_rules_two"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPERATOR = "achilles_operator"
RUNNER = "achilles_runner"
API = "achilles_api"
SOURCES = "tool_mcp_sources"
APPROVALS = "tool_approvals"
_TS = sa.DateTime(timezone=True)
# A runner sees its agent's tools' sources, and its agent's approvals.
RUNNER_POLICIES = {
    SOURCES: "tool_id IN (SELECT t.tool_id FROM agent_tools t"
    " WHERE t.agent_id = achilles_run_agent_id())",
    APPROVALS: "agent_id = achilles_run_agent_id()",
}


def _now() -> sa.TextClause:
    return sa.text("now()")


def _sources() -> None:
    op.create_table(
        SOURCES,
        sa.Column("tool_id", sa.BigInteger, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("headers", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
        sa.Column("credentials", sa.Text, nullable=False, server_default=sa.text("'platform'")),
        sa.Column("allowed_tools", ARRAY(sa.Text), nullable=True),
        sa.Column("approval", sa.Text, nullable=False, server_default=sa.text("'writes'")),
        sa.Column("tool_approvals", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("timeout_seconds", sa.Integer, nullable=False),
        sa.Column("max_result_bytes", sa.Integer, nullable=False),
        sa.Column("listed_tools", JSONB, nullable=True),
        sa.Column("listing_digest", sa.Text, nullable=True),
        sa.Column("listed_at", _TS, nullable=True),
        sa.Column("list_error", sa.Text, nullable=True),
        sa.Column("updated_at", _TS, nullable=False, server_default=_now()),
        sa.PrimaryKeyConstraint("tool_id", name=op.f("pk_tool_mcp_sources")),
        sa.ForeignKeyConstraint(
            ["tool_id"],
            ["tools.id"],
            name=op.f("fk_tool_mcp_sources_tool_id_tools"),
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(MCP_APPROVAL_CHECK, name=op.f("ck_tool_mcp_sources_approval")),
        sa.CheckConstraint(MCP_CREDENTIALS_CHECK, name=op.f("ck_tool_mcp_sources_credentials")),
        sa.CheckConstraint(
            "timeout_seconds BETWEEN 1 AND 300", name=op.f("ck_tool_mcp_sources_timeout_range")
        ),
        sa.CheckConstraint(
            "max_result_bytes BETWEEN 256 AND 1048576",
            name=op.f("ck_tool_mcp_sources_result_cap_range"),
        ),
    )


def _approvals() -> None:
    op.create_table(
        APPROVALS,
        sa.Column("id", sa.BigInteger, sa.Identity(), nullable=False),
        sa.Column("agent_id", sa.BigInteger, nullable=False),
        sa.Column("tool_id", sa.BigInteger, nullable=False),
        sa.Column("item_id", sa.BigInteger, nullable=False),
        sa.Column("mcp_tool", sa.Text, nullable=False),
        sa.Column("arguments", JSONB, nullable=False),
        sa.Column("arguments_sha256", sa.LargeBinary, nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("asked_by_run_id", sa.BigInteger, nullable=True),
        sa.Column("state", sa.Text, nullable=False, server_default=sa.text("'pending'")),
        sa.Column("expires_at", _TS, nullable=False),
        sa.Column("decided_at", _TS, nullable=True),
        sa.Column("decided_by", sa.Text, nullable=True),
        sa.Column("executed_by_run_id", sa.BigInteger, nullable=True),
        sa.Column("executed_at", _TS, nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("result_error", sa.Text, nullable=True),
        sa.Column("reported_at", _TS, nullable=True),
        sa.Column("created_at", _TS, nullable=False, server_default=_now()),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_approvals")),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_tool_approvals_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tool_id"],
            ["tools.id"],
            name=op.f("fk_tool_approvals_tool_id_tools"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["item_id"],
            ["agent_inbox_items.id"],
            name=op.f("fk_tool_approvals_item_id_agent_inbox_items"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("item_id", name=op.f("uq_tool_approvals_item_id")),
        sa.CheckConstraint(APPROVAL_STATE_CHECK, name=op.f("ck_tool_approvals_state")),
        sa.CheckConstraint(
            "length(arguments_sha256) = 32",
            name=op.f("ck_tool_approvals_arguments_sha256_length"),
        ),
    )
    op.create_index(op.f("ix_tool_approvals_agent_id"), APPROVALS, ["agent_id"])
    op.create_index(op.f("ix_tool_approvals_tool_id"), APPROVALS, ["tool_id"])
    op.create_index(
        "uq_tool_approvals_open_call",
        APPROVALS,
        ["agent_id", "tool_id", "mcp_tool", "arguments_sha256"],
        unique=True,
        postgresql_where=sa.text(OPEN_APPROVAL_PREDICATE),
    )


def _access() -> None:
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {SOURCES}, {APPROVALS} TO {OPERATOR}")
    op.execute(f"GRANT SELECT ON {SOURCES} TO {API}, {RUNNER}")
    op.execute(f"GRANT SELECT, UPDATE ON {APPROVALS} TO {API}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE ON {APPROVALS} TO {RUNNER}")
    op.execute(
        f"DO $$ BEGIN EXECUTE format('GRANT USAGE ON SEQUENCE %s TO {RUNNER}, {OPERATOR}',"
        f" pg_get_serial_sequence('{APPROVALS}', 'id')); END $$"
    )
    for table, policy in RUNNER_POLICIES.items():
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        for role in (OPERATOR, API):
            op.execute(
                f"CREATE POLICY {table}_{role.removeprefix('achilles_')} ON {table}"
                f" TO {role} USING (true) WITH CHECK (true)"
            )
        op.execute(
            f"CREATE POLICY {table}_runner ON {table} TO {RUNNER}"
            f" USING ({policy}) WITH CHECK ({policy})"
        )


def upgrade() -> None:
    _sources()
    _approvals()
    _access()
    op.add_column("agent_run_steps", sa.Column("argument_sha256", sa.LargeBinary, nullable=True))


def downgrade() -> None:
    op.drop_column("agent_run_steps", "argument_sha256")
    op.drop_table(APPROVALS)
    op.drop_table(SOURCES)
