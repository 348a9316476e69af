"""Reading the organisation's platform settings (the singleton row)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from achilles.db.journal.models import PlatformSettings


@dataclass(frozen=True)
class Settings:
    timezone: str
    weekly_token_budget: int
    max_iterations: int
    max_concurrency: int
    run_timeout_seconds: int
    platform_prompt: str
    # The run controls' defaults (0013_run_controls); None: no cap, never suspend.
    max_run_tokens: int | None = None
    suspend_after_failures: int | None = None

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


def load_settings(session: Session) -> Settings:
    return settings_of(
        session.execute(select(PlatformSettings).where(PlatformSettings.id == 1)).scalar_one()
    )


def settings_of(row: PlatformSettings) -> Settings:
    """The settings row as read with another query (joined on `PlatformSettings.id == 1`)."""
    return Settings(
        timezone=row.timezone,
        weekly_token_budget=row.agent_weekly_token_budget,
        max_iterations=row.agent_max_iterations,
        max_concurrency=row.agent_max_concurrency,
        run_timeout_seconds=row.agent_run_timeout_seconds,
        platform_prompt=row.agent_platform_prompt,
        max_run_tokens=row.agent_max_run_tokens,
        suspend_after_failures=row.agent_suspend_after_failures,
    )


def database_now(session: Session) -> datetime:
    """The database's clock: the one clock every writer and the reaper agree on."""
    return session.execute(select(func.now())).scalar_one()


def database_started_at(session: Session) -> datetime:
    """When this PostgreSQL server started: no heartbeat could be written before it."""
    started: datetime = session.execute(select(func.pg_postmaster_start_time())).scalar_one()
    return started
