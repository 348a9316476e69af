"""The Agent custom resource: one employee's agent, as the portal or kubectl writes it.

Field names are the contract of DESIGN.md §2. The schedule is the domain's own union
(`achilles.domain.schedule`), so the API server, the CLI and the database all accept the
same schedules; this module only adds what is specific to the CR spelling and the
rules that need the old object (owner is immutable).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from achilles.domain.runs import FailReason, RunState, RunTrigger, SkipReason
from achilles.domain.schedule import SCHEDULE_ADAPTER, Schedule
from achilles.domain.users import USER_KEY_MAX_LENGTH, USER_KEY_PATTERN
from achilles.k8s.resources.cel import PATH, CelRule, Reason, cel_rules
from achilles.k8s.resources.common import (
    CustomResource,
    ResourceName,
    RowStatus,
    SpecModel,
    StatusModel,
    drop_nulls,
)

# A user key of the platform's users table ("alice", "alice@example.org"): the domain's
# one rule, which the CLI and the database's CHECK share.
OWNER_PATTERN = USER_KEY_PATTERN
OWNER_MAX_LENGTH = USER_KEY_MAX_LENGTH
DISPLAY_NAME_MAX_LENGTH = 200
DESCRIPTION_MAX_LENGTH = 2000
PROMPT_MAX_LENGTH = 65536
MAX_TOOLS = 32
# The run controls' bounds (0013_run_controls): a week's budget at most, a streak a
# person would still read.
MAX_RUN_TOKENS = 10**12
MAX_SUSPEND_AFTER_FAILURES = 1000

# The schedule union itself is exact per type (the generator derives those rules from
# the union); what the union cannot say is the domain's weekday rule. A daily schedule's
# weekday is accepted and ignored (seed 000: it "matters only for weekly").
SCHEDULE_RULES = cel_rules(
    CelRule(
        rule="!has(self.cadence) || self.cadence != 'weekly' || has(self.weekday)",
        message=f"{PATH}.weekday is required when cadence is weekly (0=Monday .. 6=Sunday)",
        field_path=".weekday",
        reason=Reason.REQUIRED,
    ),
)

OWNER_RULES = cel_rules(
    CelRule(
        rule="self == oldSelf",
        message=f"{PATH} is immutable; create a new Agent for another owner",
    )
)


class AgentSpec(SpecModel):
    """What the employee set up."""

    owner: str = Field(
        min_length=1,
        max_length=OWNER_MAX_LENGTH,
        pattern=OWNER_PATTERN,
        description="Key of the owning user (users.key); immutable after create.",
        json_schema_extra=OWNER_RULES,
    )
    display_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=DISPLAY_NAME_MAX_LENGTH,
        description="Name shown in the owner's list of agents (default: metadata.name).",
    )
    description: str | None = Field(
        default=None,
        max_length=DESCRIPTION_MAX_LENGTH,
        description="Subtitle for people; never sent to the model.",
    )
    prompt: str = Field(
        min_length=1,
        max_length=PROMPT_MAX_LENGTH,
        description="The owner's layer of the prompt, composed under the platform prompt.",
    )
    schedule: Schedule | None = Field(
        default=None,
        description="When the agent runs by itself; absent = manual runs only. "
        "{type: interval, everyHours: N} or "
        "{type: calendar, cadence: daily|weekly, weekday: 0-6 (0=Monday; weekly only, "
        "ignored for daily), "
        "time: HH:MM in the owner's time zone}.",
        json_schema_extra=SCHEDULE_RULES,
    )
    model: ResourceName | None = Field(
        default=None,
        description="Name of an AgentModel; absent = no model, the agent does not run.",
    )
    tools: list[ResourceName] = Field(
        default_factory=list,
        max_length=MAX_TOOLS,
        description="AgentTool names beyond the locked Knowledge Store core.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    enabled: bool = Field(default=True, description="The owner's switch.")
    admin_paused: bool = Field(
        default=False,
        description="The admin's sticky lock; only members of the admin groups may change it.",
    )
    wake_on_reply: bool | None = Field(
        default=None,
        description="The owner's consent that a human's reply to the agent's blocked inbox "
        "question requests a run (absent: the setting of `achilles inbox wake-on-reply`, "
        "off unless set there).",
    )
    max_run_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RUN_TOKENS,
        description="Tokens one run may spend: the runner stops the run when its tokens "
        "reach this (the model call that crossed it counts) and it fails with reason "
        "token_cap (absent: the AgentPlatform's maxRunTokens; no cap if neither is set).",
    )
    suspend_after_failures: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SUSPEND_AFTER_FAILURES,
        description="After this many failed runs in a row the scheduler stops scheduling "
        "the agent (manual runs still allowed); any change of the spec resumes it. "
        "0 = never; absent = the AgentPlatform's suspendAfterFailures.",
    )

    @field_validator("schedule", mode="before")
    @classmethod
    def _cr_spelling_of_schedule(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        value = drop_nulls(value)
        if value.get("type") == "interval" and not {"everyHours", "every_hours"} & value.keys():
            # The domain names both spellings on the object; a CR has one, name the field.
            raise ValidationError.from_exception_data(
                "Schedule", [{"type": "missing", "loc": ("everyHours",), "input": value}]
            )
        # The domain model also reads the database spelling (every_hours); a CR has only
        # everyHours, so validate by alias alone. Its errors keep their field paths.
        return SCHEDULE_ADAPTER.validate_python(value, by_alias=True, by_name=False)

    @field_validator("tools", mode="after")
    @classmethod
    def _tools_are_a_set(cls, tools: list[str]) -> list[str]:
        duplicates = sorted({tool for tool in tools if tools.count(tool) > 1})
        if duplicates:
            raise PydanticCustomError(
                "duplicate_value",
                "duplicate tool name(s): {names}",
                {"names": ", ".join(duplicates)},
            )
        return tools


class LastRun(StatusModel):
    """The agent's most recent run, as recorded in the run journal."""

    id: int = Field(ge=1, description="agent_runs.id")
    trigger: RunTrigger = Field(description="manual (a run request) or scheduled.")
    state: RunState = Field(description="queued, running, succeeded, failed or skipped.")
    reason: SkipReason | FailReason | None = Field(
        default=None, description="Why it was skipped or failed (a machine code)."
    )
    started_at: datetime | None = Field(default=None, description="When the runner claimed it.")
    finished_at: datetime | None = Field(default=None, description="When it ended.")
    tokens_used: int = Field(default=0, ge=0, description="Model tokens the run spent.")


class WeeklyTokens(StatusModel):
    """The owner's token use this week (all of their agents) against the weekly budget."""

    used: int = Field(ge=0, description="Tokens the owner's runs spent this week.")
    limit: int = Field(ge=0, description="The weekly budget (AgentPlatform weeklyTokenBudget).")
    window_start: datetime = Field(description="Start of the budget week (Sunday 00:00).")


class WithdrawnRunRequest(StatusModel):
    """A run request whose queued run was removed before it started: a durable lock
    closed while it waited (seed 000: a closed lock leaves no row), so it was refused."""

    request: str = Field(
        max_length=64, description="The achilles.io/run-requested-at value it answered."
    )
    message: str = Field(max_length=1024, description="Why it was refused, in words.")


class AgentStatus(RowStatus):
    """What the operator reports; owned by the operator, read by people and the portal."""

    database_table = "agents"
    phase: str | None = Field(
        default=None,
        max_length=64,
        description="One word for why the agent can or cannot run "
        "(e.g. Ready, Disabled, AdminPaused, NoModel, OwnerMissing).",
    )
    schedule_summary: str | None = Field(
        default=None, max_length=256, description="The schedule in words, for kubectl get."
    )
    next_run_at: datetime | None = Field(
        default=None, description="The next scheduled slot (none: manual runs only, or locked)."
    )
    last_run: LastRun | None = None
    weekly_tokens: WeeklyTokens | None = None
    last_handled_run_request: str | None = Field(
        default=None,
        max_length=64,
        description="The achilles.io/run-requested-at value last turned into a run request.",
    )
    withdrawn_run_request: WithdrawnRunRequest | None = None
    last_handled_cancel_request: str | None = Field(
        default=None,
        max_length=64,
        description="The achilles.io/cancel-run value last handled (the run it named was "
        "cancelled, or had ended already).",
    )
    suspended_at: datetime | None = Field(
        default=None,
        description="When the scheduler stopped scheduling the agent after "
        "suspendAfterFailures failed runs in a row (absent: not suspended).",
    )


class AgentResource(CustomResource):
    """An employee's personal AI agent: its prompt, schedule, model and tools."""

    kind: Literal["Agent"]
    spec: AgentSpec
    status: AgentStatus | None = None
