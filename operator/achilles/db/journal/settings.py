"""The organisation's platform settings (the singleton row): read, and written from the
AgentPlatform (services/catalogue.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Row, func, select, update
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


# The settings row's columns by the `Settings` field each fills, read as plain labelled
# columns (`SETTINGS_COLUMNS`), not as an ORM entity: a whole-entity select through the
# session builds and tracks an instance per read, the bulk of a short read's Python
# cost (a full reconcile reads the settings with its first statement).
_FIELDS = {
    "timezone": PlatformSettings.timezone,
    "weekly_token_budget": PlatformSettings.agent_weekly_token_budget,
    "max_iterations": PlatformSettings.agent_max_iterations,
    "max_concurrency": PlatformSettings.agent_max_concurrency,
    "run_timeout_seconds": PlatformSettings.agent_run_timeout_seconds,
    "platform_prompt": PlatformSettings.agent_platform_prompt,
    "max_run_tokens": PlatformSettings.agent_max_run_tokens,
    "suspend_after_failures": PlatformSettings.agent_suspend_after_failures,
}
SETTINGS_COLUMNS = tuple(column.label(f"settings_{name}") for name, column in _FIELDS.items())
_LOAD = select(*SETTINGS_COLUMNS).where(PlatformSettings.id == 1)


def load_settings(session: Session) -> Settings:
    return settings_of(session.connection().execute(_LOAD).one())


def write_settings(session: Session, settings: Settings) -> None:
    """The row set to `settings` (the AgentPlatform's, mirrored), column by column as
    `_FIELDS` reads them."""
    values = {column: getattr(settings, name) for name, column in _FIELDS.items()}
    session.execute(update(PlatformSettings).where(PlatformSettings.id == 1).values(values))


def settings_of(row: Row[Any]) -> Settings:
    """The settings from a row that selected `SETTINGS_COLUMNS` (a query of its own, or
    another one joined on `PlatformSettings.id == 1`)."""
    values = row._mapping
    return Settings(**{name: values[f"settings_{name}"] for name in _FIELDS})


def database_now(session: Session) -> datetime:
    """The database's clock: the one clock every writer and the reaper agree on."""
    return session.execute(select(func.now())).scalar_one()


def database_started_at(session: Session) -> datetime:
    """When this PostgreSQL server started: no heartbeat could be written before it."""
    started: datetime = session.execute(select(func.pg_postmaster_start_time())).scalar_one()
    return started
