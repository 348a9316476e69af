"""The words the operator writes on its resources, in one place: condition types, their
reasons, and Event reasons, CamelCase as `kubectl describe` shows them.

docs/operator.md lists them for users; a new word belongs here first.
"""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class ConditionType(StrEnum):
    READY = "Ready"
    TOOLS_RESOLVED = "ToolsResolved"
    SCHEDULED = "Scheduled"
    RUN_REQUEST_ACCEPTED = "RunRequestAccepted"
    DEFAULT_CONFLICT = "DefaultConflict"
    # The owner's weekly tokens reached a warning threshold (issue 22); absent below it.
    BUDGET_WARNING = "BudgetWarning"


class ConditionReason(StrEnum):
    """Why a condition has its status (the closed locks' own reasons are LOCK_REASONS)."""

    STARTABLE = "Startable"
    INVALID_SPEC = "InvalidSpec"
    ALL_KNOWN = "AllKnown"
    UNKNOWN_TOOLS = "UnknownTools"
    ON_SCHEDULE = "OnSchedule"
    UNKNOWN_TIME_ZONE = "UnknownTimeZone"
    ACCEPTED = "Accepted"
    REFUSED = "Refused"
    MIRRORED = "Mirrored"
    TWO_DEFAULTS = "TwoDefaults"
    SUSPENDED_AFTER_FAILURES = "SuspendedAfterFailures"
    BUDGET_AT_80 = "BudgetAt80Percent"
    BUDGET_AT_95 = "BudgetAt95Percent"
    # AgentTools from MCP servers (issue 38): the server's tools listed, or why not.
    TOOLS_LISTED = "ToolsListed"
    SERVER_UNREACHABLE = "ServerUnreachable"
    CREDENTIALS_UNAVAILABLE = "CredentialsUnavailable"


class EventReason(StrEnum):
    """Events the operator posts on Agents (and, for runs, on the run's Agent)."""

    RUN_QUEUED = "RunQueued"
    RUN_SKIPPED = "RunSkipped"
    RUN_REFUSED = "RunRefused"
    RUN_FAILED = "RunFailed"
    RUN_REAPED = "RunReaped"
    OWNER_DEACTIVATED = "OwnerDeactivated"
    DEFAULT_MODEL = "DefaultModel"
    MODEL_WITHDRAWN = "ModelWithdrawn"
    # Run controls (issue 22): a run cancelled (or a cancel that found it ended), an
    # agent no longer scheduled after failed runs in a row.
    RUN_CANCELLED = "RunCancelled"
    AGENT_SUSPENDED = "AgentSuspended"
    BUDGET_THRESHOLD_CROSSED = "BudgetThresholdCrossed"
    # On the AgentPlatform: a notification was given up after its last attempt.
    NOTIFICATION_DEAD = "NotificationDead"
    # On an AgentTool with an MCP source (issue 38): its server's tools listed for the
    # first time or changed since the last listing, or the server not reached.
    MCP_TOOLS_LISTED = "McpToolsListed"
    MCP_TOOLS_CHANGED = "McpToolsChanged"
    MCP_SERVER_UNREACHABLE = "McpServerUnreachable"


# The phase an Agent shows when nothing closes it.
READY_PHASE = "Ready"
INVALID_PHASE = "Invalid"
# No durable lock closed, but the scheduler stopped scheduling it (run controls).
SUSPENDED_PHASE = "Suspended"
