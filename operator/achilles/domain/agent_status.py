"""An Agent's status document, built from its journal row: conditions, phase, schedule
summary and the journal's fields. Pure: the reconcile of an Agent event
(services/agent_events.py), the status writer and the read services build the same document
from the same row (db/journal/status.py reads it).

Conditions keep their `lastTransitionTime` while their status stays the same, so a
status written again is byte-identical and the operator can skip the API call.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from achilles.domain.gates import DurableLocks, LockReason, closed_locks
from achilles.domain.notifications import budget_warning
from achilles.domain.run_controls import RESUME_HINT
from achilles.domain.schedule import (
    CalendarSchedule,
    IntervalSchedule,
    load_timezone,
    parse_schedule,
)
from achilles.domain.timestamps import iso_utc
from achilles.domain.vocabulary import (
    READY_PHASE,
    SUSPENDED_PHASE,
    ConditionReason,
    ConditionType,
)
from achilles.errors import InvalidInputError, UnknownTimezoneError


@dataclass(frozen=True)
class LastRunRow:
    run_id: int
    trigger: str
    state: str
    reason: str | None
    started_at: datetime | None
    finished_at: datetime | None
    tokens_used: int


@dataclass(frozen=True)
class AgentStatusRow:
    agent_id: int
    uid: str | None
    namespace: str | None
    cr_name: str | None
    schedule: dict[str, Any] | None
    next_run_at: datetime | None
    zone: str
    locks: DurableLocks
    last_run: LastRunRow | None
    tokens_used: int
    token_limit: int
    window_start: datetime
    # When the scheduler suspended the agent after failed runs in a row (0013).
    suspended_at: datetime | None = None


WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
# The BudgetWarning condition's reason for the highest threshold reached.
BUDGET_REASONS = {80: ConditionReason.BUDGET_AT_80, 95: ConditionReason.BUDGET_AT_95}

# Condition reasons (CamelCase, as kubectl shows them) for each closed durable lock.
LOCK_REASONS = {
    LockReason.DISABLED: "Disabled",
    LockReason.ADMIN_PAUSED: "AdminPaused",
    LockReason.NO_MODEL: "NoModel",
    LockReason.OWNER_MISSING: "OwnerMissing",
    LockReason.OWNER_INACTIVE: "OwnerInactive",
}
LOCK_MESSAGES = {
    LockReason.DISABLED: "the owner switched the agent off (spec.enabled: false)",
    LockReason.ADMIN_PAUSED: "an admin paused the agent (spec.adminPaused: true)",
    LockReason.NO_MODEL: "no model: set spec.model to an AgentModel",
    LockReason.OWNER_MISSING: "the owner is not a known user",
    LockReason.OWNER_INACTIVE: "the owner's account is deactivated",
}


def refusal_message(closed: tuple[str, ...]) -> str:
    """What a run request refused by closed locks is told (at enqueue, at dispatch or at
    the claim): the same words wherever the refusal comes from."""
    return "run refused: " + "; ".join(LOCK_MESSAGES[LockReason(lock)] for lock in closed)


def condition(
    kind: str,
    ok: bool,
    reason: str,
    message: str,
    previous: list[dict[str, Any]] | None,
    now: datetime,
    generation: int | None = None,
) -> dict[str, Any]:
    status = "True" if ok else "False"
    since = now
    for old in previous or []:
        if (
            old.get("type") == kind
            and old.get("status") == status
            and old.get("lastTransitionTime")
        ):
            since = datetime.fromisoformat(str(old["lastTransitionTime"]).replace("Z", "+00:00"))
    document: dict[str, Any] = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": iso_utc(since.replace(microsecond=0)),
    }
    if generation is not None:
        document["observedGeneration"] = generation
    return document


def schedule_summary(schedule: dict[str, Any] | None, zone: str | None) -> str:
    if schedule is None:
        return "manual"
    try:
        parsed = parse_schedule(schedule)
    except InvalidInputError:
        return "invalid schedule"
    if isinstance(parsed, IntervalSchedule):
        return f"every {parsed.every_hours}h"
    assert isinstance(parsed, CalendarSchedule)
    where = f" {zone}" if zone else ""
    if parsed.cadence == "weekly" and parsed.weekday is not None:
        return f"weekly {WEEKDAYS[parsed.weekday]} {parsed.time}{where}"
    return f"daily {parsed.time}{where}"


def _primary(closed: tuple[LockReason, ...]) -> LockReason:
    """The lock the phase names: the owner's state first, since deactivating an owner
    also switches the agent off (seed 000) and "Disabled" would hide why."""
    owner = (LockReason.OWNER_MISSING, LockReason.OWNER_INACTIVE)
    return next((lock for lock in closed if lock in owner), closed[0])


def phase_of(closed: tuple[LockReason, ...], *, suspended: bool = False) -> str:
    """The Agent's phase (its PHASE column) for these closed durable locks: the lock that
    explains it; Suspended when the owner's switch is the only one closed and it was
    auto-suspend that switched it off (failed runs in a row)."""
    if closed == (LockReason.DISABLED,) and suspended:
        return SUSPENDED_PHASE
    if closed:
        return LOCK_REASONS[_primary(closed)]
    return READY_PHASE


def agent_status(
    row: AgentStatusRow | None,
    *,
    owner_missing: bool,
    unknown_tools: tuple[str, ...],
    schedule: dict[str, Any] | None,
    previous: dict[str, Any] | None,
    generation: int | None,
    now: datetime,
    refusal: str | None = None,
    missing_model: str | None = None,
) -> dict[str, Any]:
    """The Agent's whole status (without lastHandledRunRequest, which the caller owns).
    `missing_model`: the model the spec names, not in the allowlist (the agent links to
    it once an AgentModel of that name is created)."""
    previous = previous or {}
    old_conditions = previous.get("conditions")
    closed = (
        (LockReason.OWNER_MISSING,) if owner_missing or row is None else closed_locks(row.locks)
    )
    suspended_at = row.suspended_at if row is not None else None
    if closed:
        messages = {lock: LOCK_MESSAGES[lock] for lock in closed}
        if suspended_at is not None and LockReason.DISABLED in messages:
            messages[LockReason.DISABLED] = (
                "auto-suspend switched the agent off after failed runs in a row"
                " (spec.enabled: false): fix what made them fail, then set spec.enabled: true"
            )
        if missing_model is not None and LockReason.NO_MODEL in messages:
            messages[LockReason.NO_MODEL] = (
                f"no model: {missing_model} is not an AgentModel (not in the allowlist);"
                " the agent starts once it is created, or set spec.model to one that is"
            )
        ready = condition(
            ConditionType.READY,
            False,
            LOCK_REASONS[_primary(closed)],
            "; ".join(messages.values()),
            old_conditions,
            now,
            generation,
        )
    else:
        ready = condition(
            ConditionType.READY,
            True,
            ConditionReason.STARTABLE,
            "all durable locks are open",
            old_conditions,
            now,
            generation,
        )
    tools = condition(
        ConditionType.TOOLS_RESOLVED,
        not unknown_tools,
        ConditionReason.UNKNOWN_TOOLS if unknown_tools else ConditionReason.ALL_KNOWN,
        f"not in the tool catalogue: {', '.join(unknown_tools)}" if unknown_tools else "",
        old_conditions,
        now,
        generation,
    )
    conditions = [ready, tools]
    if schedule is not None and row is not None:
        if suspended_at is not None:
            conditions.append(_suspended(suspended_at, old_conditions, now, generation))
        else:
            conditions.append(_scheduled(row.zone, old_conditions, now, generation))
    if refusal is not None:
        conditions.append(
            condition(
                ConditionType.RUN_REQUEST_ACCEPTED,
                False,
                ConditionReason.REFUSED,
                refusal,
                old_conditions,
                now,
            )
        )
    warning = budget_warning(row.tokens_used, row.token_limit) if row is not None else None
    if warning is not None:
        threshold, message = warning
        reason = BUDGET_REASONS[threshold]
        kind = ConditionType.BUDGET_WARNING
        conditions.append(condition(kind, True, reason, message, old_conditions, now))
    status: dict[str, Any] = {
        "phase": phase_of(closed, suspended=suspended_at is not None),
        "conditions": conditions,
        "scheduleSummary": schedule_summary(schedule, row.zone if row else None),
        "observedGeneration": generation,
        "databaseId": row.agent_id if row else None,
        "nextRunAt": None,
        "lastRun": None,
        "weeklyTokens": None,
        "suspendedAt": iso_utc(suspended_at) if suspended_at is not None else None,
    }
    if row is not None:
        status.update(journal_fields(row))
    return status


def _scheduled(
    zone: str | None,
    old_conditions: list[dict[str, Any]] | None,
    now: datetime,
    generation: int | None,
) -> dict[str, Any]:
    """Whether slots can be computed: not when the owner's zone (`users.timezone`) is no
    zone, which the scheduler then leaves without a slot (the others run on)."""
    try:
        load_timezone(zone or "UTC")
    except UnknownTimezoneError:
        return condition(
            ConditionType.SCHEDULED,
            False,
            ConditionReason.UNKNOWN_TIME_ZONE,
            f"the owner's time zone {zone!r} is not a known IANA time zone, so no slot can be"
            " computed: correct the user's timezone (achilles users upsert --timezone)",
            old_conditions,
            now,
            generation,
        )
    return condition(
        ConditionType.SCHEDULED,
        True,
        ConditionReason.ON_SCHEDULE,
        "",
        old_conditions,
        now,
        generation,
    )


def _suspended(
    since: datetime,
    old_conditions: list[dict[str, Any]] | None,
    now: datetime,
    generation: int | None,
) -> dict[str, Any]:
    """The scheduler switched the agent off after failed runs in a row (its Event names
    them): why, since when, and how to resume."""
    return condition(
        ConditionType.SCHEDULED,
        False,
        ConditionReason.SUSPENDED_AFTER_FAILURES,
        f"suspended at {iso_utc(since)} after spec.suspendAfterFailures (or the platform's)"
        f" failed runs in a row: {RESUME_HINT}",
        old_conditions,
        now,
        generation,
    )


def invalid_spec_message(exc: ValidationError) -> str:
    """A spec the API server let through but the model refuses, in one line per field."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def needs_patch(current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    """Whether writing `desired` would change anything the status shows."""
    current = current or {}
    return any(current.get(key) != value for key, value in desired.items())


def journal_fields(row: AgentStatusRow) -> dict[str, Any]:
    """The part of an Agent's status that follows the journal (what the status writer
    keeps current): the next slot, the last run, the owner's weekly tokens."""
    last = row.last_run
    return {
        "nextRunAt": iso_utc(row.next_run_at),
        "lastRun": None
        if last is None
        else {
            "id": last.run_id,
            "trigger": last.trigger,
            "state": last.state,
            "reason": last.reason,
            "startedAt": iso_utc(last.started_at),
            "finishedAt": iso_utc(last.finished_at),
            "tokensUsed": last.tokens_used,
        },
        "weeklyTokens": {
            "used": row.tokens_used,
            "limit": row.token_limit,
            "windowStart": iso_utc(row.window_start),
        },
    }


JOURNAL_FIELDS = ("nextRunAt", "lastRun", "weeklyTokens")


def journal_view(status: dict[str, Any]) -> dict[str, Any]:
    """The journal fields of a whole status (`agent_status`), as `journal_fields` has them."""
    return {key: status.get(key) for key in JOURNAL_FIELDS}
