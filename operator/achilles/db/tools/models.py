"""Tables of MCP sources and approvals (migration 0018_mcp_tools; `domain/mcp_tools.py`).

`tool_mcp_sources`: the MCP server of an AgentTool with `implementation: mcp` (one row per
`tools` row, gone with it): the server's URL, the Secret keys its headers come from (never
their values), the admin's rules (allowlist, approval policies, timeout, result cap), and
the operator's last listing of the server's tools with its digest, or why it failed.

`tool_approvals`: a call that waits for its owner (seed 003: an inbox item `blocked`,
one per approval). The arguments stored are exactly what is executed; the state goes
pending -> approved | rejected | expired, then approved -> executing -> executed | failed,
each step a guarded UPDATE, so an approved call is executed once however many runs race
for it (the one whose `executing` claim wins performs it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import Mapped, mapped_column

from achilles.db.checks import in_check
from achilles.db.journal.models import Base, timestamp_column
from achilles.domain.mcp_tools import Approval, ApprovalState

MCP_APPROVAL_CHECK = in_check("approval", Approval)
MCP_CREDENTIALS_CHECK = "credentials IN ('platform')"
APPROVAL_STATE_CHECK = in_check("state", ApprovalState)
# The one open approval of a call: asking the same call again finds it.
OPEN_APPROVAL_PREDICATE = in_check(
    "state", (ApprovalState.PENDING, ApprovalState.APPROVED, ApprovalState.EXECUTING)
)


class ToolMcpSource(Base):
    __tablename__ = "tool_mcp_sources"
    __table_args__ = (
        CheckConstraint(MCP_APPROVAL_CHECK, name="approval"),
        CheckConstraint(MCP_CREDENTIALS_CHECK, name="credentials"),
        CheckConstraint("timeout_seconds BETWEEN 1 AND 300", name="timeout_range"),
        CheckConstraint("max_result_bytes BETWEEN 256 AND 1048576", name="result_cap_range"),
    )

    tool_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("tools.id", ondelete="CASCADE"), primary_key=True
    )
    url: Mapped[str] = mapped_column(Text, nullable=False)
    # [{"name": header, "secret_name": ..., "secret_key": ...}]: where values are, not them.
    headers: Mapped[list[dict[str, str]]] = mapped_column(
        JSONB, nullable=False, server_default=text("'[]'::jsonb")
    )
    credentials: Mapped[str] = mapped_column(
        Text, nullable=False, server_default=text("'platform'")
    )
    allowed_tools: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    approval: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'writes'"))
    # {tool name: approval}: the per-tool policies over `approval`.
    tool_approvals: Mapped[dict[str, str]] = mapped_column(
        JSONB, nullable=False, server_default=text("'{}'::jsonb")
    )
    timeout_seconds: Mapped[int] = mapped_column(Integer, nullable=False)
    max_result_bytes: Mapped[int] = mapped_column(Integer, nullable=False)
    # The operator's last listing (`ListedTool.as_json` each; NULL: never listed).
    listed_tools: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    listing_digest: Mapped[str | None] = mapped_column(Text)
    listed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Why the last listing failed (NULL: it did not); the listing before it is kept.
    list_error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = timestamp_column()


class ToolApproval(Base):
    __tablename__ = "tool_approvals"
    __table_args__ = (
        CheckConstraint(APPROVAL_STATE_CHECK, name="state"),
        CheckConstraint("length(arguments_sha256) = 32", name="arguments_sha256_length"),
        Index(
            "uq_tool_approvals_open_call",
            "agent_id",
            "tool_id",
            "mcp_tool",
            "arguments_sha256",
            unique=True,
            postgresql_where=text(OPEN_APPROVAL_PREDICATE),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    agent_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("agents.id", ondelete="CASCADE"), nullable=False, index=True
    )
    tool_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("tools.id", ondelete="CASCADE"), nullable=False, index=True
    )
    # The inbox item people answer (one per approval).
    item_id: Mapped[int] = mapped_column(
        BigInteger,
        ForeignKey("agent_inbox_items.id", ondelete="CASCADE"),
        nullable=False,
        unique=True,
    )
    mcp_tool: Mapped[str] = mapped_column(Text, nullable=False)
    # Exactly what is executed (the canonical arguments people saw).
    arguments: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    arguments_sha256: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    reason: Mapped[str | None] = mapped_column(Text)
    asked_by_run_id: Mapped[int | None] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'pending'"))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    decided_by: Mapped[str | None] = mapped_column(Text)
    executed_by_run_id: Mapped[int | None] = mapped_column(BigInteger)
    executed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The call's outcome, cut to the source's cap, for the agent (and people).
    result: Mapped[str | None] = mapped_column(Text)
    result_error: Mapped[str | None] = mapped_column(Text)
    # When the outcome reached the agent (a run's tool result); NULL: still owed.
    reported_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = timestamp_column()
