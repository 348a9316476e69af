"""The AgentPlatform's issue-22 settings mirrored into `platform_settings` (the operator's
login, the real database): what the runner's cap, the scheduler's streak, the notifier
and the retention pass read is what the AgentPlatform says, and a field left out (the
chart's default) reads as none: no cap, never suspend, no webhook, every run kept."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine

from achilles.db.database import Database
from achilles.db.journal.settings import Settings, load_settings
from achilles.db.outbox.settings import WebhookSettings, load_retention_days, load_webhook
from achilles.db.roles import Component
from achilles.k8s.resources.agent_platform import AgentPlatformSpec
from achilles.services import catalogue
from tests.db.logins import login_url


@pytest.fixture
def operator_db(db: Engine, database_url: str) -> Iterator[Database]:
    database = Database(login_url(database_url, Component.OPERATOR), pool_size=1)
    yield database
    database.dispose()


def _mirrored(database: Database, **spec: Any) -> dict[str, Any]:
    catalogue.mirror_platform(database, AgentPlatformSpec.model_validate(spec))
    with database.transaction() as session:
        settings = load_settings(session)
        return {
            "max_run_tokens": settings.max_run_tokens,
            "suspend_after_failures": settings.suspend_after_failures,
            "webhook": load_webhook(session),
            "retention_days": load_retention_days(session),
        }


def test_the_platforms_run_controls_notifications_and_retention_are_mirrored(
    operator_db: Database,
) -> None:
    every = _mirrored(
        operator_db,
        maxRunTokens=50000,
        suspendAfterFailures=3,
        notifications={
            "webhookUrl": "https://portal.example/hooks/achilles",
            "secretRef": {"name": "achilles-webhook", "key": "hmac"},
        },
        runRetentionDays=365,
    )
    assert every == {
        "max_run_tokens": 50000,
        "suspend_after_failures": 3,
        "webhook": WebhookSettings(
            url="https://portal.example/hooks/achilles",
            secret_name="achilles-webhook",
            secret_key="hmac",
        ),
        "retention_days": 365,
    }
    # The Secret's key defaults to "secret".
    hook = {"webhookUrl": "http://portal/h", "secretRef": {"name": "hook"}}
    assert _mirrored(operator_db, notifications=hook)["webhook"] == WebhookSettings(
        url="http://portal/h", secret_name="hook", secret_key="secret"
    )
    # Taken out again (helm upgrade without them): none of them holds any more.
    assert _mirrored(operator_db) == {
        "max_run_tokens": None,
        "suspend_after_failures": None,
        "webhook": None,
        "retention_days": None,
    }


def test_every_setting_of_the_platform_reads_back_as_mirrored(operator_db: Database) -> None:
    """Each of the row's columns is written from the field it is read into (one mapping
    for both ways, db/journal/settings.py): no value lands in another's column."""
    spec = AgentPlatformSpec.model_validate(
        {
            "timezone": "Asia/Tokyo",
            "weeklyTokenBudget": 123456,
            "maxIterations": 17,
            "maxConcurrency": 9,
            "runTimeoutSeconds": 1234,
            "platformPrompt": "Be brief.",
            "maxRunTokens": 4321,
            "suspendAfterFailures": 5,
        }
    )
    catalogue.mirror_platform(operator_db, spec)
    with operator_db.transaction() as session:
        assert load_settings(session) == Settings(
            timezone="Asia/Tokyo",
            weekly_token_budget=123456,
            max_iterations=17,
            max_concurrency=9,
            run_timeout_seconds=1234,
            platform_prompt="Be brief.",
            max_run_tokens=4321,
            suspend_after_failures=5,
        )
