"""One event of an Agent, reconciled: what the row, the status, the spec and the Events
must become. The Agent's use case, whole: the kopf handler (handlers/agents.py) parses
the event, calls `reconcile_agent_event` (or `settled_from_memory`) and applies what it
returns; nothing here calls the API server, so the whole decision is testable against
the database. Below it only db/, k8s/ (the annotations' formats, the spec's model) and
domain/ (the status document, a cancel's words): no other service (pyproject.toml's
import contracts). Its parts: the row (`agent_row`), a listed Agent that already agrees
(`intake`), and here the answers to the run and cancel requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from achilles.db.database import Database
from achilles.db.journal import cancel as cancel_rows
from achilles.db.journal.agents import agent_id_by_uid
from achilles.db.journal.runs import EnqueueResult, enqueue_run
from achilles.domain.agent_status import LOCK_MESSAGES, condition, invalid_spec_message, needs_patch
from achilles.domain.gates import LockReason
from achilles.domain.run_cancel import describe
from achilles.domain.runs import RunState, RunTrigger
from achilles.domain.vocabulary import (
    INVALID_PHASE,
    ConditionReason,
    ConditionType,
    EventReason,
    EventType,
)
from achilles.errors import NotFound, StartRefused
from achilles.k8s.annotations import (
    CANCEL_RUN,
    RUN_REQUESTED_AT,
    cancel_run_id,
    parse_cancel_request,
    parse_run_request,
)
from achilles.k8s.resources.agent import AgentSpec
from achilles.services.agent_events import agent_row
from achilles.services.agent_events.intake import SettledAgents, kept_status

# The entry: what the handlers call and read. `SettledAgents` (the snapshot of rows a
# listed Agent is checked against) is made by the operator's start (handlers/operator.py).
__all__ = [
    "AgentEvent",
    "AgentEventPost",
    "AgentReconciliation",
    "SettledAgents",
    "reconcile_agent_event",
    "settled_from_memory",
]


@dataclass(frozen=True)
class AgentEvent:
    """What the operator reads of an Agent event."""

    uid: str
    namespace: str
    name: str
    generation: int | None
    deleted: bool  # a DELETED event, or a deletion in progress
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    annotations: Mapping[str, str]


@dataclass(frozen=True)
class AgentEventPost:
    kind: EventType
    reason: EventReason
    message: str


@dataclass
class AgentReconciliation:
    # The row's id once reconciled; `removed` when the Agent is gone and so is its row.
    agent_id: int | None = None
    removed: bool = False
    status: dict[str, Any] | None = None  # the whole desired status (None: leave it)
    spec_patch: dict[str, Any] = field(default_factory=dict)
    events: list[AgentEventPost] = field(default_factory=list)
    # The answer to a new run request, for the metrics: "refused" or the run's state,
    # and the enqueued run's (state, reason) when one was written.
    request_outcome: str | None = None
    refused_locks: tuple[str, ...] = ()  # a refused request's closed locks
    enqueued: tuple[RunState, str] | None = None
    wake_dispatcher: bool = False
    journal_moved: bool = False  # a run request was answered: the status writer follows
    delete_job_of: int | None = None  # a run cancelled here: its Job (and pod) must go
    unchanged: bool = False  # the row and status already agreed: nothing was written


def reconcile_agent_event(
    database: Database, event: AgentEvent, settled: SettledAgents | None = None
) -> AgentReconciliation:
    """`settled` (for a listed Agent): a row and status that already agree with the CR
    cost nothing (`intake`)."""
    if event.deleted:
        return AgentReconciliation(
            agent_id=agent_row.forget_agent(database, event.uid), removed=True
        )
    previous = dict(event.status)
    now = datetime.now(UTC)
    try:
        obj = _agent_object(event)
    except ValidationError as exc:
        # Admission should have refused it; say so on the object rather than crash-loop.
        problem = invalid_spec_message(exc)
        ready = condition(
            ConditionType.READY,
            False,
            ConditionReason.INVALID_SPEC,
            problem,
            previous.get("conditions"),
            now,
        )
        return AgentReconciliation(status={"phase": INVALID_PHASE, "conditions": [ready]})
    unchanged = settled is not None and settled.unchanged(obj)
    if unchanged:
        reconciled = agent_row.AgentReconciled(previous["databaseId"], kept_status(previous), {})
    else:
        reconciled = agent_row.reconcile_agent(
            database, obj, is_new=previous.get("databaseId") is None
        )
    return _answered(database, event, previous, reconciled, unchanged, now)


def settled_from_memory(
    database: Database, event: AgentEvent, settled: SettledAgents
) -> AgentReconciliation | None:
    """A listed Agent that already agrees with its row and status, answered from memory
    without waiting (kopf's event loop: no statement, no API call, no thread); None when
    that cannot be told at once (the snapshot is being read, a run or cancel request on
    it awaits its answer, its spec is invalid, it differs) and `reconcile_agent_event`
    decides on a thread. `database` is not used: nothing here reads or writes."""
    previous = dict(event.status)
    if event.deleted or _request_pending(event, previous):
        return None
    try:
        obj = _agent_object(event)
    except ValidationError:
        return None
    if not settled.unchanged(obj, wait=False):
        return None
    reconciled = agent_row.AgentReconciled(previous["databaseId"], kept_status(previous), {})
    result = _answered(database, event, previous, reconciled, True, datetime.now(UTC))
    if result.status is None or needs_patch(previous, result.status):
        return None  # a patch is an API call: the thread's to make
    return result


def _agent_object(event: AgentEvent) -> agent_row.AgentObject:
    """The Agent with its spec parsed (`ValidationError` when it is invalid)."""
    return agent_row.AgentObject(
        uid=event.uid,
        namespace=event.namespace,
        name=event.name,
        generation=event.generation,
        spec=AgentSpec.model_validate(dict(event.spec)),
        status=dict(event.status),
    )


def _request_pending(event: AgentEvent, previous: dict[str, Any]) -> bool:
    """A run or cancel request on the Agent that its status has not answered yet."""
    run = parse_run_request(event.annotations.get(RUN_REQUESTED_AT))
    cancel = parse_cancel_request(event.annotations.get(CANCEL_RUN))
    return (run is not None and run != previous.get("lastHandledRunRequest")) or (
        cancel is not None and cancel != previous.get("lastHandledCancelRequest")
    )


def _answered(
    database: Database,
    event: AgentEvent,
    previous: dict[str, Any],
    reconciled: agent_row.AgentReconciled,
    unchanged: bool,
    now: datetime,
) -> AgentReconciliation:
    """The reconciliation of `reconciled`: its Events, and the answers to the run and
    cancel requests the status has not answered yet."""
    result = AgentReconciliation(
        agent_id=reconciled.agent_id, spec_patch=reconciled.spec_patch, unchanged=unchanged
    )
    if reconciled.spec_patch.get("enabled") is False:
        message = "the owner's account is deactivated: spec.enabled set to false"
        result.events.append(
            AgentEventPost(EventType.NORMAL, EventReason.OWNER_DEACTIVATED, message)
        )
    if "model" in reconciled.spec_patch:
        model = reconciled.spec_patch["model"]
        message = f"no model chosen: the default model {model} was given"
        result.events.append(AgentEventPost(EventType.NORMAL, EventReason.DEFAULT_MODEL, message))
    desired = dict(reconciled.status)
    request = parse_run_request(event.annotations.get(RUN_REQUESTED_AT))
    if request is not None and request != previous.get("lastHandledRunRequest"):
        desired["lastHandledRunRequest"] = request
        answer = _answer_run_request(database, event.uid, request, result)
        desired["conditions"] = [
            *desired["conditions"],
            condition(
                ConditionType.RUN_REQUEST_ACCEPTED,
                answer.accepted,
                ConditionReason.ACCEPTED if answer.accepted else ConditionReason.REFUSED,
                answer.message,
                previous.get("conditions"),
                now,
            ),
        ]
    elif previous.get("conditions"):
        kept = [
            c for c in previous["conditions"] if c.get("type") == ConditionType.RUN_REQUEST_ACCEPTED
        ]
        desired["conditions"] = [*desired["conditions"], *kept]
    cancel = parse_cancel_request(event.annotations.get(CANCEL_RUN))
    if (
        cancel is not None
        and cancel != previous.get("lastHandledCancelRequest")
        and reconciled.agent_id is not None
    ):
        desired["lastHandledCancelRequest"] = cancel
        _answer_cancel_request(database, reconciled.agent_id, cancel, result)
    result.status = desired
    return result


def _answer_cancel_request(
    database: Database, agent_id: int, request: str, result: AgentReconciliation
) -> None:
    """A cancel request not handled yet: the run it names ends `failed/cancelled` (if it
    still was queued or running) and its Job goes; the answer is an Event either way."""
    run_id = cancel_run_id(request)
    if run_id is None:
        message = f"{CANCEL_RUN}: {request!r} is not a run id; nothing was cancelled"
        result.events.append(AgentEventPost(EventType.WARNING, EventReason.RUN_CANCELLED, message))
        return
    try:
        # The one way a run ends cancelled (db/journal/cancel.py), as `achilles runs
        # cancel` asks it (services/run_cancel.py), in a transaction of its own.
        with database.transaction() as session:
            outcome = cancel_rows.cancel_run(
                session,
                run_id,
                f"cancelled by a request on the Agent ({CANCEL_RUN})",
                agent_id=agent_id,
            )
    except NotFound:
        message = f"{CANCEL_RUN}: this agent has no run {run_id}; nothing was cancelled"
        result.events.append(AgentEventPost(EventType.WARNING, EventReason.RUN_CANCELLED, message))
        return
    result.events.append(
        AgentEventPost(EventType.NORMAL, EventReason.RUN_CANCELLED, describe(outcome))
    )
    if outcome.cancelled:
        result.journal_moved = True
        if outcome.stopping:
            result.delete_job_of = run_id  # its slot is free once the pod is gone
        else:
            result.wake_dispatcher = True  # its slot is free


@dataclass(frozen=True)
class _Answer:
    accepted: bool
    message: str


def _answer_run_request(
    database: Database, uid: str, request: str, result: AgentReconciliation
) -> _Answer:
    """A run request not handled yet: a run, or a refusal (the annotation's contract)."""
    outcome = _handle_run_request(database, uid, request)
    if outcome.result is None:
        refusal = outcome.refusal or "run refused"
        result.request_outcome = "refused"
        result.refused_locks = outcome.closed_locks
        result.events.append(AgentEventPost(EventType.WARNING, EventReason.RUN_REFUSED, refusal))
        return _Answer(False, outcome.refusal or "")
    run = outcome.result
    result.journal_moved = True
    if not run.duplicate_request:
        result.request_outcome = run.state
        result.enqueued = (run.state, run.reason or "")
        if run.state is RunState.SKIPPED:
            message = f"manual run {run.run_id} skipped: {run.reason}"
            result.events.append(AgentEventPost(EventType.NORMAL, EventReason.RUN_SKIPPED, message))
        else:
            message = f"manual run {run.run_id} queued (request {request})"
            result.events.append(AgentEventPost(EventType.NORMAL, EventReason.RUN_QUEUED, message))
            result.wake_dispatcher = True
    return _Answer(True, f"request {request} answered by run {run.run_id}")


@dataclass(frozen=True)
class _RequestOutcome:
    result: EnqueueResult | None  # None: refused
    refusal: str | None = None
    closed_locks: tuple[str, ...] = ()  # a refusal's (LockReason codes)


def _handle_run_request(database: Database, agent_uid: str, request: str) -> _RequestOutcome:
    """A new `achilles.io/run-requested-at` value is one request, honoured once: its value
    is recorded with the row it caused (`agent_runs.request_key`, unique per agent), so
    two replicas that both see it, or one that retries after a crash, write one row
    between them. A closed durable lock refuses it with no row (DESIGN.md §4); budget and
    overlap write a skipped row. A lock that closes while the run waits for its turn
    removes the row (`services/dispatch.py`), and the status's `withdrawnRunRequest` tells
    the requester it was refused after all."""
    with database.transaction() as session:
        agent_id = agent_id_by_uid(session, agent_uid)
        if agent_id is None:
            return _RequestOutcome(
                None,
                "run refused: " + LOCK_MESSAGES[LockReason.OWNER_MISSING],
                (LockReason.OWNER_MISSING,),
            )
        try:
            result = enqueue_run(session, agent_id, RunTrigger.MANUAL, request_key=request)
        except StartRefused as refused:
            messages = [LOCK_MESSAGES[LockReason(code)] for code in refused.reasons]
            refusal = "run refused: " + "; ".join(messages)
            return _RequestOutcome(None, refusal, refused.reasons)
    return _RequestOutcome(result)
