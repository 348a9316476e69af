"""Status documents of the four kinds, built from what the journal says.

Conditions keep their `lastTransitionTime` while their status stays the same, so a
status written again is byte-identical and the operator can skip the API call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from achilles.db.database import Database
from achilles.db.journal.status import (
    AgentStatusRow,
    RunOwner,
    agent_status_rows,
    agents_of_owners,
    run_owners,
)
from achilles.domain.gates import LockReason, closed_locks
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
from achilles.k8s.annotations import (
    CANCEL_RUN,
    RUN_REQUESTED_AT,
    parse_cancel_request,
    parse_run_request,
)

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


def is_own_status_echo(
    event_type: str | None, meta: Mapping[str, Any], status: Mapping[str, Any]
) -> bool:
    """An update of a Ready Agent whose spec the operator already reconciled (its
    generation is the status's observedGeneration) and whose run request it already
    handled: the operator's own status write coming back as a watch event, what
    controller-runtime's GenerationChanged and AnnotationChanged predicates filter out.
    Reconciling it again would change nothing but cost a transaction per event.

    Everything else is reconciled: the listing at start (type None), a new or deleted
    object, a spec change, a new run request, and an Agent that is not Ready, whose lock
    may open without an event of its own (its model created later).
    """
    if event_type != "MODIFIED" or meta.get("deletionTimestamp"):
        return False
    if status.get("databaseId") is None or status.get("phase") != "Ready":
        return False
    if status.get("observedGeneration") != meta.get("generation"):
        return False
    annotations = meta.get("annotations") or {}
    request = parse_run_request(annotations.get(RUN_REQUESTED_AT))
    if request is not None and request != status.get("lastHandledRunRequest"):
        return False
    cancel = parse_cancel_request(annotations.get(CANCEL_RUN))
    return cancel is None or cancel == status.get("lastHandledCancelRequest")


# --- the reads of the operator's status writer and Events ---


def agent_rows(database: Database, agent_ids: Iterable[int]) -> list[AgentStatusRow]:
    """These agents' status rows (their CR's name, the journal's fields)."""
    with database.transaction() as session:
        return agent_status_rows(session, agent_ids)


def run_owner(database: Database, run_id: int) -> RunOwner | None:
    """The agent of a run (its CR's name), None when the run is gone."""
    with database.transaction() as session:
        return run_owners(session, [run_id]).get(run_id)


@dataclass(frozen=True)
class StatusesToWrite:
    rows: list[AgentStatusRow]
    # The owners' other agents: they share the weekly budget that moved.
    siblings: set[int]


def statuses_to_write(
    database: Database, agent_ids: set[int], siblings: set[int]
) -> StatusesToWrite:
    """The rows of the agents whose journal fields moved and of the siblings whose turn
    came, and the moved agents' siblings (to be written in a coming turn): one
    transaction."""
    with database.transaction() as session:
        others = set(agents_of_owners(session, agent_ids)) - agent_ids
        rows = agent_status_rows(session, agent_ids | siblings)
    return StatusesToWrite(rows, others)
