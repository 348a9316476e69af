"""Typed SQLAlchemy models of the engine's tables and the neighbour tables it reads.

The schema itself is owned by the Alembic migrations (`db/migrations`); these
models mirror it for queries, and a test compares the two. Column meanings are
those of seed 000. Relationships are `lazy="raise"`: queries say what they load.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

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
    MetaData,
    SmallInteger,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from achilles.db import checks

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def timestamp_column() -> Mapped[datetime]:
    """`timestamptz NOT NULL DEFAULT now()`: every table's created_at and updated_at."""
    return mapped_column(DateTime(timezone=True), nullable=False, server_default=func.now())


# --- neighbour tables (owned by Auth / Admin elsewhere; shipped for standalone installs) ---


class User(Base):
    __tablename__ = "users"
    __table_args__ = (CheckConstraint(checks.USER_KEY_CHECK, name="key_format"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    key: Mapped[str] = mapped_column(Text, nullable=False, unique=True)  # e.g. "alice"
    timezone: Mapped[str | None] = mapped_column(Text)  # NULL = the organisation's
    active: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("true"))
    created_at: Mapped[datetime] = timestamp_column()


class AgentModel(Base):
    """The admin allowlist of chat models agents may use."""

    __tablename__ = "agent_models"
    __table_args__ = (
        # At most one list preset for new agents.
        Index(
            "uq_agent_models_single_default",
            "is_default",
            unique=True,
            postgresql_where=text("is_default"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    base_url: Mapped[str] = mapped_column(Text, nullable=False)
    provider_model: Mapped[str] = mapped_column(Text, nullable=False)
    api_key_secret_name: Mapped[str | None] = mapped_column(Text)
    api_key_secret_key: Mapped[str | None] = mapped_column(Text)
    is_default: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    created_at: Mapped[datetime] = timestamp_column()
    # The AgentModel object mirrored here (0020): another uid under this name is a new
    # object, its predecessor deleted (NULL: made in the database, or not seen since).
    cr_uid: Mapped[str | None] = mapped_column(Text)


class Tool(Base):
    """The tool catalogue; `agents_allowed` is the admin's allowlist switch."""

    __tablename__ = "tools"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    name: Mapped[str] = mapped_column(Text, nullable=False, unique=True)
    description: Mapped[str | None] = mapped_column(Text)
    implementation: Mapped[str] = mapped_column(Text, nullable=False)
    agents_allowed: Mapped[bool] = mapped_column(
        Boolean, nullable=False, server_default=text("true")
    )
    created_at: Mapped[datetime] = timestamp_column()
    # The AgentTool object mirrored here (0020), as `AgentModel.cr_uid`.
    cr_uid: Mapped[str | None] = mapped_column(Text)


class PlatformSettings(Base):
    """The organisation's settings: a single row (id = 1)."""

    __tablename__ = "platform_settings"
    __table_args__ = (
        CheckConstraint("id = 1", name="singleton"),
        CheckConstraint("agent_weekly_token_budget >= 0", name="budget_non_negative"),
        CheckConstraint("agent_max_iterations >= 1", name="iterations_positive"),
        CheckConstraint("agent_max_concurrency >= 1", name="concurrency_positive"),
        CheckConstraint("agent_run_timeout_seconds >= 1", name="timeout_positive"),
        # 0013_run_controls
        CheckConstraint(
            "agent_max_run_tokens IS NULL OR agent_max_run_tokens >= 1",
            name="max_run_tokens_positive",
        ),
        CheckConstraint(
            "agent_suspend_after_failures IS NULL OR agent_suspend_after_failures >= 1",
            name="suspend_after_failures_positive",
        ),
        # 0014_notifications
        CheckConstraint(
            "agent_run_retention_days IS NULL OR agent_run_retention_days >= 1",
            name="retention_positive",
        ),
        CheckConstraint(
            "agent_webhook_url IS NOT NULL"
            " OR (agent_webhook_secret_name IS NULL AND agent_webhook_secret_key IS NULL)",
            name="webhook_secret_with_url",
        ),
    )

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, server_default=text("1"))
    timezone: Mapped[str] = mapped_column(Text, nullable=False, server_default=text("'UTC'"))
    agent_weekly_token_budget: Mapped[int] = mapped_column(
        BigInteger, nullable=False, server_default=text("200000")
    )
    agent_max_iterations: Mapped[int] = mapped_column(
        Integer, nullable=False, server_default=text("8")
    )
    agent_max_concurrency: Mapped[int] = mapped_column(
        Integer, nullable=False, server_default=text("4")
    )
    agent_run_timeout_seconds: Mapped[int] = mapped_column(
        Integer, nullable=False, server_default=text("900")
    )
    agent_platform_prompt: Mapped[str] = mapped_column(
        Text, nullable=False, server_default=text("''")
    )
    # The organisation's defaults of an agent's run controls (0013_run_controls): the
    # tokens one run may spend (NULL: no cap), the failed runs in a row after which the
    # scheduler stops scheduling the agent (NULL: never).
    agent_max_run_tokens: Mapped[int | None] = mapped_column(BigInteger)
    agent_suspend_after_failures: Mapped[int | None] = mapped_column(Integer)
    # Notifications and retention (0014_notifications): the webhook's URL and the Secret
    # (runs namespace) with its signing key (NULL URL: no notifications); the days a
    # finished run is kept (NULL: for ever).
    agent_webhook_url: Mapped[str | None] = mapped_column(Text)
    agent_webhook_secret_name: Mapped[str | None] = mapped_column(Text)
    agent_webhook_secret_key: Mapped[str | None] = mapped_column(Text)
    agent_run_retention_days: Mapped[int | None] = mapped_column(Integer)
    updated_at: Mapped[datetime] = timestamp_column()


# --- engine-owned tables (seed 000) ---


class Agent(Base):
    __tablename__ = "agents"
    __table_args__ = (
        # 0013_run_controls
        CheckConstraint(
            "max_run_tokens IS NULL OR max_run_tokens >= 1", name="max_run_tokens_positive"
        ),
        CheckConstraint(
            "suspend_after_failures IS NULL OR suspend_after_failures >= 0",
            name="suspend_after_failures_non_negative",
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    user_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True
    )
    name: Mapped[str] = mapped_column(Text, nullable=False)
    description: Mapped[str | None] = mapped_column(Text)
    prompt: Mapped[str] = mapped_column(Text, nullable=False)
    schedule: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    model_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("agent_models.id", ondelete="SET NULL"), index=True
    )
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("true"))
    admin_paused: Mapped[bool] = mapped_column(
        Boolean, nullable=False, server_default=text("false")
    )
    next_run_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    meta: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    # The Agent custom resource this row reconciles from (namespace/name for
    # events and status, uid so a re-created CR of the same name is a new agent).
    cr_uid: Mapped[str | None] = mapped_column(Text, unique=True)
    cr_namespace: Mapped[str | None] = mapped_column(Text)
    cr_name: Mapped[str | None] = mapped_column(Text)
    # The time zone `next_run_at` was computed in (owner's, else the organisation's).
    schedule_zone: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = timestamp_column()
    updated_at: Mapped[datetime] = timestamp_column()
    # The Agent's run controls (0013_run_controls; NULL: the platform's): the tokens one
    # run may spend, and the failed runs in a row that suspend its schedule (0: never).
    max_run_tokens: Mapped[int | None] = mapped_column(BigInteger)
    suspend_after_failures: Mapped[int | None] = mapped_column(Integer)
    # When the scheduler stopped scheduling it after that many failures (NULL: it did
    # not); an edit of the agent clears it (`db/journal/agents.py`, `upsert_agent`).
    suspended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


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


class DeletedAgentTokens(Base):
    """Tokens spent by an owner's deleted agents, per finish time (0009_seed_rules).

    A trigger on `agents` writes these before the cascade removes the agent's runs, so
    the weekly budget (`db/journal/usage.py`) still counts them: deleting an agent does
    not give its tokens back. Append-only; the rows go with their owner.
    """

    __tablename__ = "deleted_agent_tokens"
    __table_args__ = (
        CheckConstraint("tokens_used > 0", name="tokens_positive"),
        Index(
            "ix_deleted_agent_tokens_user_id_finished_at",
            "user_id",
            "finished_at",
            postgresql_include=["tokens_used"],
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    user_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False
    )
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    tokens_used: Mapped[int] = mapped_column(BigInteger, nullable=False)
    created_at: Mapped[datetime] = timestamp_column()


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


class AgentToolLink(Base):
    """The optional tools an owner picked beyond the locked KS core (append-only)."""

    __tablename__ = "agent_tools"
    __table_args__ = (UniqueConstraint("agent_id", "tool_id"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    agent_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("agents.id", ondelete="CASCADE"), nullable=False, index=True
    )
    tool_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("tools.id", ondelete="CASCADE"), nullable=False, index=True
    )
    created_at: Mapped[datetime] = timestamp_column()
