"""Typed SQLAlchemy models of the run tables: `agent_runs` (a run's row, its state and
what it used), `agent_run_steps` (the steps it recorded) and `run_start_refusals` (a run
its start gates refused, for the dispatcher to report). As db/journal/models.py, whose
module re-exports them: the schema is the migrations', the columns' meanings seed 000's.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from achilles.db import checks
from achilles.db.journal.base import Base, timestamp_column


class AgentRun(Base):
    __tablename__ = "agent_runs"
    __table_args__ = (
        # The value lists and state rules are the domain's (`achilles.db.checks`).
        CheckConstraint(checks.RUN_TRIGGER_CHECK, name="trigger"),
        CheckConstraint(checks.RUN_STATE_CHECK, name="state"),
        CheckConstraint(checks.RUN_REASON_MATCHES_STATE_CHECK, name="reason_matches_state"),
        CheckConstraint("tokens_used >= 0", name="tokens_non_negative"),
        CheckConstraint(checks.RUN_SKIPPED_SPENDS_NOTHING_CHECK, name="skipped_spends_nothing"),
        CheckConstraint(checks.RUN_FINISHED_IFF_TERMINAL_CHECK, name="finished_iff_terminal"),
        CheckConstraint(checks.RUN_STARTED_WHEN_RAN_CHECK, name="started_when_ran"),
        CheckConstraint(checks.RUN_USED_PROMPT_SHA256_CHECK, name="used_prompt_sha256_length"),
        CheckConstraint(
            "(stop_requested_at IS NULL) = (stop_error IS NULL)"
            " AND (stop_requested_at IS NULL) = (stop_reason IS NULL)"
            " AND stop_reason IN ('cancelled', 'stale')",
            name="stop_request_complete",
        ),
        # One active run per agent: the database is the lock (seed 000).
        Index(
            "uq_agent_runs_one_active_per_agent",
            "agent_id",
            unique=True,
            postgresql_where=text(checks.ACTIVE_RUN_PREDICATE),
        ),
        # One run per manual request value (idempotent across operator replicas).
        Index(
            "uq_agent_runs_request_key",
            "agent_id",
            "request_key",
            unique=True,
            postgresql_where=text("request_key IS NOT NULL"),
        ),
        # FIFO dispatch of waiting runs.
        Index(
            "ix_agent_runs_queued_fifo",
            "created_at",
            "id",
            postgresql_where=text(checks.QUEUED_RUN_PREDICATE),
        ),
        # The weekly budget: an owner's agents' runs finished in a window (0006).
        Index(
            "ix_agent_runs_agent_id_finished_at",
            "agent_id",
            "finished_at",
            postgresql_include=["tokens_used"],
        ),
        # The reaper: running rows by heartbeat (0006).
        Index(
            "ix_agent_runs_running_heartbeat_at",
            "heartbeat_at",
            postgresql_where=text("state = 'running'"),
        ),
        # The status writer: each agent's last run (0006).
        Index("ix_agent_runs_agent_id_id", "agent_id", text("id DESC")),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    agent_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("agents.id", ondelete="CASCADE"), nullable=False, index=True
    )
    trigger: Mapped[str] = mapped_column(Text, nullable=False)
    state: Mapped[str] = mapped_column(Text, nullable=False)
    reason: Mapped[str | None] = mapped_column(Text)
    output: Mapped[str | None] = mapped_column(Text)
    tokens_used: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default=text("0"))
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = timestamp_column()
    # The run-request annotation value a manual run answers (unique per agent).
    request_key: Mapped[str | None] = mapped_column(Text)
    # When the dispatcher took the run to create its Job (counts against the cap).
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The slot a scheduled run was due at.
    scheduled_for: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # A stop asked while the run has (or may have) a pod: a cancel (0019) or the reaper
    # (0021). The row stays active, holding its agent, until the pod is gone; then it
    # ends `failed/<stop_reason>` with `stop_error` (who or what asked), whatever end is
    # written (the trigger `achilles_end_as_asked`).
    stop_requested_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    stop_reason: Mapped[str | None] = mapped_column(Text)
    stop_error: Mapped[str | None] = mapped_column(Text)
    # SHA-256 of the secret the run's Job carries (written at dispatch): what lets the
    # runner role see and write this row, and nothing else (0011_least_privilege).
    runner_secret_hash: Mapped[bytes | None] = mapped_column(LargeBinary)
    # What the run used, written by its runner at start (0012_run_steps,
    # `domain/run_trace.py`): the model's name, the endpoint's host and the provider's
    # model id (no key), the composed prompt's SHA-256, the tool names offered.
    used_model: Mapped[str | None] = mapped_column(Text)
    used_endpoint_host: Mapped[str | None] = mapped_column(Text)
    used_provider_model: Mapped[str | None] = mapped_column(Text)
    used_prompt_sha256: Mapped[bytes | None] = mapped_column(LargeBinary)
    used_tools: Mapped[list[str] | None] = mapped_column(ARRAY(Text))


class AgentRunStep(Base):
    """A run's steps as they happened (0012_run_steps, `domain/run_trace.py`): model
    calls, tool calls and inbox asks with their times and sizes, never their content.
    Written by the run's runner only while the run is running; deleted with the run."""

    __tablename__ = "agent_run_steps"
    __table_args__ = (
        CheckConstraint(checks.STEP_KIND_CHECK, name="kind"),
        CheckConstraint(checks.STEP_TOOL_STATUS_CHECK, name="status"),
        CheckConstraint(checks.STEP_SEQ_CHECK, name="seq_range"),
        CheckConstraint(checks.STEP_TRUNCATED_LAST_CHECK, name="truncated_last"),
        CheckConstraint(checks.STEP_FIELDS_MATCH_KIND_CHECK, name="fields_match_kind"),
        CheckConstraint(checks.STEP_COUNTS_NON_NEGATIVE_CHECK, name="counts_non_negative"),
    )

    run_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("agent_runs.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(Text, nullable=False)
    # The runner's clock (the step's own times); latency by its monotonic clock.
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    ended_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    latency_ms: Mapped[float] = mapped_column(Double, nullable=False)
    model: Mapped[str | None] = mapped_column(Text)
    input_tokens: Mapped[int | None] = mapped_column(BigInteger)
    output_tokens: Mapped[int | None] = mapped_column(BigInteger)
    finish_reason: Mapped[str | None] = mapped_column(Text)
    tool: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str | None] = mapped_column(Text)
    argument_bytes: Mapped[int | None] = mapped_column(Integer)
    result_bytes: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    # SHA-256 of an MCP call's canonical arguments (0018_mcp_tools), never the arguments.
    argument_sha256: Mapped[bytes | None] = mapped_column(LargeBinary)


class RunStartRefusal(Base):
    """A run its claim refused because a durable lock had closed since its Job was made
    (0016_seed_rules_two): the claim removed the run (a closed lock leaves no row, seed
    000) and left this for the operator, which tells the Agent (an Event, a refused run
    request), deletes the Job and then this row. The locks as the claim found them."""

    __tablename__ = "run_start_refusals"

    run_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    agent_id: Mapped[int] = mapped_column(BigInteger, nullable=False)
    trigger: Mapped[str] = mapped_column(Text, nullable=False)
    request_key: Mapped[str | None] = mapped_column(Text)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False)
    admin_paused: Mapped[bool] = mapped_column(Boolean, nullable=False)
    has_model: Mapped[bool] = mapped_column(Boolean, nullable=False)
    owner_present: Mapped[bool] = mapped_column(Boolean, nullable=False)
    owner_active: Mapped[bool] = mapped_column(Boolean, nullable=False)
    created_at: Mapped[datetime] = timestamp_column()
