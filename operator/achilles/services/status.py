"""Status documents of the four kinds, built from what the journal says.

Conditions keep their `lastTransitionTime` while their status stays the same, so a
status written again is byte-identical and the operator can skip the API call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from achilles.db.journal.status import AgentStatusRow
from achilles.domain.gates import LockReason, closed_locks
from achilles.domain.schedule import (
    CalendarSchedule,
    IntervalSchedule,
    load_timezone,
    parse_schedule,
)
from achilles.domain.timestamps import iso_utc
from achilles.errors import InvalidInputError, UnknownTimezoneError
from achilles.k8s.annotations import RUN_REQUESTED_AT, parse_run_request

WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")

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


def phase_of(closed: tuple[LockReason, ...]) -> str:
    """The Agent's phase (its PHASE column) for these closed durable locks."""
    return LOCK_REASONS[_primary(closed)] if closed else "Ready"


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
) -> dict[str, Any]:
    """The Agent's whole status (without lastHandledRunRequest, which the caller owns)."""
    previous = previous or {}
    old_conditions = previous.get("conditions")
    closed = (
        (LockReason.OWNER_MISSING,) if owner_missing or row is None else closed_locks(row.locks)
    )
    if closed:
        ready = condition(
            "Ready",
            False,
            LOCK_REASONS[_primary(closed)],
            "; ".join(LOCK_MESSAGES[lock] for lock in closed),
            old_conditions,
            now,
            generation,
        )
    else:
        ready = condition(
            "Ready",
            True,
            "Startable",
            "all durable locks are open",
            old_conditions,
            now,
            generation,
        )
    tools = condition(
        "ToolsResolved",
        not unknown_tools,
        "UnknownTools" if unknown_tools else "AllKnown",
        f"not in the tool catalogue: {', '.join(unknown_tools)}" if unknown_tools else "",
        old_conditions,
        now,
        generation,
    )
    conditions = [ready, tools]
    if schedule is not None and row is not None:
        conditions.append(_scheduled(row.zone, old_conditions, now, generation))
    if refusal is not None:
        conditions.append(
            condition("RunRequestAccepted", False, "Refused", refusal, old_conditions, now)
        )
    status: dict[str, Any] = {
        "phase": phase_of(closed),
        "conditions": conditions,
        "scheduleSummary": schedule_summary(schedule, row.zone if row else None),
        "observedGeneration": generation,
        "databaseId": row.agent_id if row else None,
        "nextRunAt": None,
        "lastRun": None,
        "weeklyTokens": None,
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
            "Scheduled",
            False,
            "UnknownTimeZone",
            f"the owner's time zone {zone!r} is not a known IANA time zone, so no slot can be"
            " computed: correct the user's timezone (achilles users upsert --timezone)",
            old_conditions,
            now,
            generation,
        )
    return condition("Scheduled", True, "OnSchedule", "", old_conditions, now, generation)


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


class WrittenStatuses:
    """What the status writer last patched for each agent, so that it patches only the
    agents whose journal fields changed.

    A run changing state marks its owner's every agent (they share the weekly budget), so
    without this each run meant a patch per agent of its owner and per state (57 patches a
    second at 2 runs a second with ten agents per owner, `achilles bench steady-state`),
    and every patch came back to the operator as a watch event. Thread-safe: the writer
    and the handlers (which write the whole status) both record here.
    """

    def __init__(self) -> None:
        self._written: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def changed(self, agent_id: int, fields: dict[str, Any]) -> bool:
        with self._lock:
            return self._written.get(agent_id) != fields

    def record(self, agent_id: int, fields: dict[str, Any]) -> None:
        with self._lock:
            self._written[agent_id] = fields

    def forget(self, agent_id: int) -> None:
        with self._lock:
            self._written.pop(agent_id, None)


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
    request = parse_run_request((meta.get("annotations") or {}).get(RUN_REQUESTED_AT))
    return request is None or request == status.get("lastHandledRunRequest")


class StatusQueue:
    """Which Agents' statuses the status writer rewrites next, and which Agent events
    must be reconciled in full although their spec did not change. Thread-safe: the
    handlers, the listener and the loops mark; the status writer takes.

    An owner's agents share the weekly budget, so one run's tokens change the status of
    every agent of its owner. The agent whose run moved is written at once; the owner's
    other agents in turns, every `sibling_every` seconds at most `sibling_batch` of
    them, longest waiting first, each once however often its budget moved meanwhile. An
    owner with 1,000 agents turned every run's end into 1,000 patches and as many watch
    events per replica (`achilles chaos double-leader`); an owner with a few agents sees
    the budget on all of them within one turn.
    """

    def __init__(
        self,
        sibling_every: float,
        sibling_batch: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sibling_every = sibling_every
        self.sibling_batch = sibling_batch
        self._clock = clock
        self._lock = threading.Lock()
        self._now: set[int] = set()
        self._siblings: dict[int, None] = {}  # insertion-ordered: longest waiting first
        self._siblings_taken_at = float("-inf")
        self._reconcile: set[int] = set()

    def mark(self, agent_ids: Iterable[int]) -> None:
        """These agents' own journal fields moved: write them at the next pass."""
        with self._lock:
            self._now.update(agent_ids)

    def mark_siblings(self, agent_ids: Iterable[int]) -> None:
        """These agents share a budget that moved: write them in a coming turn."""
        with self._lock:
            for agent_id in agent_ids:
                self._siblings.setdefault(agent_id, None)

    def take(self) -> tuple[set[int], set[int]]:
        """(agents to write now, siblings whose turn came): both leave the queue."""
        with self._lock:
            now, self._now = self._now, set()
            siblings: set[int] = set()
            if self._siblings and self._clock() - self._siblings_taken_at >= self.sibling_every:
                for agent_id in list(self._siblings)[: self.sibling_batch]:
                    del self._siblings[agent_id]
                    siblings.add(agent_id)
                self._siblings_taken_at = self._clock()
            return now, siblings

    def put_back(self, now: set[int], siblings: set[int]) -> None:
        """A pass failed: what it took is written at the next one."""
        with self._lock:
            self._now |= now
            for agent_id in siblings:
                self._siblings.setdefault(agent_id, None)

    def want_reconcile(self, agent_ids: Iterable[int]) -> None:
        """Reconcile these agents at their next event (their owner's zone moved)."""
        with self._lock:
            self._reconcile.update(agent_ids)

    def take_reconcile(self, agent_id: int) -> bool:
        with self._lock:
            wanted = agent_id in self._reconcile
            self._reconcile.discard(agent_id)
            return wanted
