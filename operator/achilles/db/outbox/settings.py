"""The platform settings of notifications and retention (0014_notifications)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from achilles.db.journal.models import PlatformSettings

DEFAULT_SECRET_KEY = "secret"  # noqa: S105 - the key's name, not a secret


@dataclass(frozen=True)
class WebhookSettings:
    url: str
    secret_name: str | None
    secret_key: str


def load_webhook(session: Session) -> WebhookSettings | None:
    """The webhook notifications go to; None when none is set."""
    row = session.execute(
        select(
            PlatformSettings.agent_webhook_url,
            PlatformSettings.agent_webhook_secret_name,
            PlatformSettings.agent_webhook_secret_key,
        ).where(PlatformSettings.id == 1)
    ).one()
    if row.agent_webhook_url is None:
        return None
    return WebhookSettings(
        url=row.agent_webhook_url,
        secret_name=row.agent_webhook_secret_name,
        secret_key=row.agent_webhook_secret_key or DEFAULT_SECRET_KEY,
    )


def load_retention_days(session: Session) -> int | None:
    """Days a finished run is kept; None: for ever."""
    days = session.execute(
        select(PlatformSettings.agent_run_retention_days).where(PlatformSettings.id == 1)
    ).scalar_one()
    return None if days is None else int(days)


def write_notification_settings(
    session: Session,
    *,
    webhook_url: str | None,
    secret_name: str | None,
    secret_key: str | None,
    retention_days: int | None,
) -> None:
    """The AgentPlatform's `notifications` and `runRetentionDays`, mirrored."""
    session.execute(
        update(PlatformSettings)
        .where(PlatformSettings.id == 1)
        .values(
            agent_webhook_url=webhook_url,
            agent_webhook_secret_name=secret_name,
            agent_webhook_secret_key=secret_key,
            agent_run_retention_days=retention_days,
        )
    )
