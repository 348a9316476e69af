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
    ForeignKey,
    Identity,
    Index,
    Integer,
    SmallInteger,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from achilles.db import checks

# The base, and the run tables (db/journal/run_models.py), re-exported: queries and the
# other models name them here.
from achilles.db.journal.base import NAMING_CONVENTION as NAMING_CONVENTION
from achilles.db.journal.base import Base as Base
from achilles.db.journal.base import timestamp_column as timestamp_column
from achilles.db.journal.run_models import AgentRun as AgentRun
from achilles.db.journal.run_models import AgentRunStep as AgentRunStep
from achilles.db.journal.run_models import RunStartRefusal as RunStartRefusal

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
