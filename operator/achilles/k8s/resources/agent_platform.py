"""The AgentPlatform custom resource: the organisation's settings (`platform_settings`).

A cluster-scoped singleton named `default`: one organisation per installation, so a
second object could only disagree with the first. Defaults equal the database's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from achilles.domain.schedule import load_timezone
from achilles.domain.timezones import iana_timezones
from achilles.errors import UnknownTimezoneError
from achilles.k8s.resources.agent import MAX_RUN_TOKENS, MAX_SUSPEND_AFTER_FAILURES
from achilles.k8s.resources.cel import PATH, CelRule, cel_rules, cel_string
from achilles.k8s.resources.common import (
    CustomResource,
    ObjectMeta,
    ResourceStatus,
    SpecModel,
)
from achilles.k8s.resources.notifications import MAX_RUN_RETENTION_DAYS, NotificationsSpec

SINGLETON_NAME = "default"
# IANA zone names ("UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+3").
TIMEZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$"
TIMEZONE_MAX_LENGTH = 64
# CEL has no "is this a zone" function, and looking a name up in the API server's own
# tz database (`timestamp(...).getHours(self)`) fails with a runtime error whose raw text
# ("unknown time zone X evaluating rule: ...") becomes the message. So the rule is the
# engine's own list (`iana_timezones`, the locked tzdata's), which also makes the API
# server accept exactly what the engine can compute with.
TIMEZONE_RULES = cel_rules(
    CelRule(
        rule=f"self in [{', '.join(cel_string(name) for name in sorted(iana_timezones()))}]",
        message=f"{PATH} must be an IANA time zone name like Europe/Berlin",
        message_expression=(
            '"unknown time zone \'" + self + "\' (expected an IANA name like Europe/Berlin)"'
        ),
    )
)
MAX_WEEKLY_TOKEN_BUDGET = 10**12
MAX_ITERATIONS = 1000
MAX_CONCURRENCY = 1000
MAX_RUN_TIMEOUT_SECONDS = 86400
PLATFORM_PROMPT_MAX_LENGTH = 65536


class AgentPlatformSpec(SpecModel):
    """Organisation-wide settings for agents."""

    timezone: str = Field(
        default="UTC",
        min_length=1,
        max_length=TIMEZONE_MAX_LENGTH,
        pattern=TIMEZONE_PATTERN,
        description="IANA time zone of the organisation: budget weeks start Sunday 00:00 "
        "here, and calendar schedules of owners without a zone resolve here.",
        json_schema_extra=TIMEZONE_RULES,
    )
    weekly_token_budget: int = Field(
        default=200000,
        ge=0,
        le=MAX_WEEKLY_TOKEN_BUDGET,
        description="Tokens each owner may spend per week across all of their agents.",
    )
    max_iterations: int = Field(
        default=8, ge=1, le=MAX_ITERATIONS, description="Model/tool rounds per run."
    )
    max_concurrency: int = Field(
        default=4,
        ge=1,
        le=MAX_CONCURRENCY,
        description="Runs executing at once; the runs namespace's pod quota backs it.",
    )
    run_timeout_seconds: int = Field(
        default=900,
        ge=1,
        le=MAX_RUN_TIMEOUT_SECONDS,
        description="Wall-clock limit of one run (the Job's active deadline).",
    )
    platform_prompt: str = Field(
        default="",
        max_length=PLATFORM_PROMPT_MAX_LENGTH,
        description="Prompt every agent's own prompt is composed under.",
    )
    max_run_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RUN_TOKENS,
        description="Tokens one run may spend, unless its Agent sets spec.maxRunTokens: "
        "the run fails with reason token_cap when its tokens reach this (absent: no cap).",
    )
    suspend_after_failures: int | None = Field(
        default=None,
        ge=1,
        le=MAX_SUSPEND_AFTER_FAILURES,
        description="Failed runs in a row after which an agent is no longer scheduled "
        "(manual runs still allowed; a change of its spec resumes it), unless the Agent "
        "sets spec.suspendAfterFailures (absent: never).",
    )
    notifications: NotificationsSpec | None = Field(
        default=None,
        description="The webhook notifications are POSTed to, signed (absent: none are sent).",
    )
    run_retention_days: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RUN_RETENTION_DAYS,
        description="Finished runs older than this many days are deleted (never one the "
        "current budget week counts); absent: every run is kept.",
    )

    @field_validator("timezone", mode="after")
    @classmethod
    def _known_timezone(cls, name: str) -> str:
        try:
            load_timezone(name)
        except UnknownTimezoneError as exc:
            raise PydanticCustomError(
                "unknown_timezone", "unknown time zone (expected an IANA name like Europe/Berlin)"
            ) from exc
        return name


# The platform is the `platform_settings` singleton: no row id to report.
class AgentPlatformStatus(ResourceStatus):
    """What the operator reports about the settings."""


class AgentPlatformResource(CustomResource):
    """The organisation's agent settings; exactly one, named default."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            CelRule(
                rule=f"self.metadata.name == '{SINGLETON_NAME}'",
                message=f"metadata.name must be '{SINGLETON_NAME}': "
                "there is one AgentPlatform per cluster",
            )
        )
    )

    kind: Literal["AgentPlatform"]
    spec: AgentPlatformSpec
    status: AgentPlatformStatus | None = None

    @field_validator("metadata", mode="after")
    @classmethod
    def _singleton_name(cls, metadata: ObjectMeta) -> ObjectMeta:
        if metadata.name != SINGLETON_NAME:
            raise PydanticCustomError(
                "singleton_name",
                "metadata.name must be '{expected}': there is one AgentPlatform per cluster",
                {"expected": SINGLETON_NAME},
            )
        return metadata
