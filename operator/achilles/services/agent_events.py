"""One event of an Agent, reconciled: what the row, the status, the spec and the Events
must become. The Agent's use case, whole: the Agent handler (handlers/agents.py) reads the
event, calls `reconcile_agent_event` (or `settled_from_memory`) and applies what it
returns; nothing here calls the API server, so the decision is testable against the
database. The row's statements are db/journal/agent_row.py's and agent_links.py's; what
the event asks and the status document are domain/'s (agent_event, agent_status). No
other service is called (pyproject.toml's import contracts): the intake's memory of
settled rows (services/agent_intake.py) is handed in as `SettledRows`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from achilles.db.database import Database
from achilles.db.journal import agent_links, agent_row, catalogue, owed_spec
from achilles.db.journal import cancel as cancel_rows
from achilles.db.journal.runs import enqueue_run
from achilles.domain.agent_event import (
    AgentEvent,
    AgentEventPost,
    AgentReconciliation,
    cancel_run_id,
    cr_digest,
    kept_status,
    parse_cancel_request,
    parse_run_request,
)
from achilles.domain.agent_status import (
    agent_status,
    condition,
    invalid_spec_message,
    needs_patch,
    refusal_message,
)
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
from achilles.k8s.annotations import CANCEL_RUN, RUN_REQUESTED_AT
from achilles.k8s.resources.agent import AgentSpec


class SettledRows(Protocol):
    """The rows read as settled when the operator started (services/agent_intake.py's
    `SettledAgents`): whether a listed Agent's digest is among them, answered once;
    `wait=False` (the agent watch's thread): False at once when the snapshot is not at hand."""

    def unchanged(
        self, digest: bytes, wake_on_reply: bool | None, *, wait: bool = True
    ) -> bool: ...


@dataclass(frozen=True)
class AgentObject:
    """The parts of an Agent CR the operator reads, its spec parsed."""

    uid: str
    namespace: str
    name: str
    generation: int | None
    spec: AgentSpec
    status: dict[str, Any]


@dataclass(frozen=True)
class AgentReconciled:
    agent_id: int | None
    status: dict[str, Any]
    # Spec fields the operator must write back onto the CR (owner deactivated; the
    # default model given to a new agent).
    spec_patch: dict[str, Any]


def reconcile_agent_event(
    database: Database, event: AgentEvent, settled: SettledRows | None = None
) -> AgentReconciliation:
    """`settled` (for a listed Agent): a row and status that already agree with the CR
    cost nothing (the intake, services/agent_intake.py)."""
    if event.deleted:
        return AgentReconciliation(agent_id=forget_agent(database, event.uid), removed=True)
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
    unchanged = settled is not None and _listed_unchanged(settled, event, obj.spec, wait=True)
    if unchanged:
        reconciled = AgentReconciled(previous["databaseId"], kept_status(previous), {})
    else:
        reconciled = reconcile_agent(database, obj, is_new=previous.get("databaseId") is None)
    return _answered(database, event, previous, reconciled, unchanged, now)


def settled_from_memory(
    database: Database, event: AgentEvent, settled: SettledRows
) -> AgentReconciliation | None:
    """A listed Agent that already agrees with its row and status, answered from memory
    without waiting (the agent watch's thread: no statement, no API call); None when
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
    if not _listed_unchanged(settled, event, obj.spec, wait=False):
        return None
    reconciled = AgentReconciled(previous["databaseId"], kept_status(previous), {})
    result = _answered(database, event, previous, reconciled, True, datetime.now(UTC))
    if result.status is None or needs_patch(previous, result.status):
        return None  # a patch is an API call: the thread's to make
    return result


def _agent_object(event: AgentEvent) -> AgentObject:
    """The Agent with its spec parsed (`ValidationError` when it is invalid)."""
    return AgentObject(
        uid=event.uid,
        namespace=event.namespace,
        name=event.name,
        generation=event.generation,
        spec=AgentSpec.model_validate(dict(event.spec)),
        status=dict(event.status),
    )


def _listed_unchanged(
    settled: SettledRows, event: AgentEvent, spec: AgentSpec, *, wait: bool
) -> bool:
    """A listed Agent whose row and status already agree with it: its digest is among
    the settled rows, and its `spec.wakeOnReply` (if it says one) is the row's."""
    digest = cr_digest(event, spec)
    return digest is not None and settled.unchanged(digest, spec.wake_on_reply, wait=wait)


def _requests(event: AgentEvent) -> tuple[str | None, str | None]:
    """The run and cancel requests the Agent's annotations carry (None: none)."""
    annotations = event.annotations
    return (
        parse_run_request(annotations.get(RUN_REQUESTED_AT)),
        parse_cancel_request(annotations.get(CANCEL_RUN)),
    )


def _request_pending(event: AgentEvent, previous: dict[str, Any]) -> bool:
    """A run or cancel request on the Agent that its status has not answered yet."""
    run, cancel = _requests(event)
    return (run is not None and run != previous.get("lastHandledRunRequest")) or (
        cancel is not None and cancel != previous.get("lastHandledCancelRequest")
    )


def _answered(
    database: Database,
    event: AgentEvent,
    previous: dict[str, Any],
    reconciled: AgentReconciled,
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
    request, cancel = _requests(event)
    if request is not None and request != previous.get("lastHandledRunRequest"):
        desired["lastHandledRunRequest"] = request
        accepted, message = _answer_run_request(database, event.uid, request, result)
        desired["conditions"] = [
            *desired["conditions"],
            condition(
                ConditionType.RUN_REQUEST_ACCEPTED,
                accepted,
                ConditionReason.ACCEPTED if accepted else ConditionReason.REFUSED,
                message,
                previous.get("conditions"),
                now,
            ),
        ]
    elif previous.get("conditions"):
        kept = [
            c for c in previous["conditions"] if c.get("type") == ConditionType.RUN_REQUEST_ACCEPTED
        ]
        desired["conditions"] = [*desired["conditions"], *kept]
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


def _answer_run_request(
    database: Database, uid: str, request: str, result: AgentReconciliation
) -> tuple[bool, str]:
    """A run request not handled yet: a run, or a refusal; (accepted, the condition's
    message). A new `achilles.io/run-requested-at` value is one request, honoured once:
    its value is recorded with the row it caused (`agent_runs.request_key`, unique per
    agent), so two replicas that both see it, or one that retries after a crash, write
    one row between them. A closed durable lock refuses it with no row (DESIGN.md §4);
    budget and overlap write a skipped row. A lock that closes while the run waits for
    its turn removes the row (`services/dispatch.py`), and the status's
    `withdrawnRunRequest` tells the requester it was refused after all."""
    run = None
    with database.transaction() as session:
        agent_id = agent_row.agent_id_by_uid(session, uid)
        closed: tuple[str, ...] = (LockReason.OWNER_MISSING,)  # no row: no owner
        if agent_id is not None:
            try:
                run = enqueue_run(session, agent_id, RunTrigger.MANUAL, request_key=request)
            except StartRefused as refused:
                closed = refused.reasons
    if run is None:
        refusal = refusal_message(closed)
        result.request_outcome = "refused"
        result.refused_locks = closed
        result.events.append(AgentEventPost(EventType.WARNING, EventReason.RUN_REFUSED, refusal))
        return False, refusal
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
    return True, f"request {request} answered by run {run.run_id}"


# --- the row ---


def reconcile_agent(
    database: Database, agent: AgentObject, *, is_new: bool = False
) -> AgentReconciled:
    spec_patch: dict[str, Any] = {}
    with database.transaction() as session:
        # The clock, the owner and the row (locked) in one statement (agent_row.begin_reconcile).
        start = agent_row.begin_reconcile(session, agent.uid, agent.spec.owner)
        now, owner, row = start.now, start.owner, start.row
        # What the operator still owes this CR (a withdrawn model, a deactivated owner)
        # wins over what the CR says until it is delivered: re-creating a model of that
        # name meanwhile must not revive the agent silently (seed 000).
        owed = agent_row.settle_owed(
            session,
            row.agent_id if row else None,
            row.owed if row else None,
            {
                owed_spec.MODEL_FIELD: agent.spec.model,
                owed_spec.ENABLED_FIELD: agent.spec.enabled,
            },
        )
        model_name = owed.get(owed_spec.MODEL_FIELD, agent.spec.model)
        if model_name is None and is_new and owed_spec.MODEL_FIELD not in owed:
            # DESIGN §2: the list's preset is offered to a new agent, at creation only.
            model_name = catalogue.default_model_name(session)
            if model_name is not None:
                spec_patch["model"] = model_name
        if owner is None:
            # No user, no row (agents.user_id is NOT NULL); a row from before the
            # owner's deletion went with it (CASCADE).
            agent_row.delete_agent_by_uid(session, agent.uid)
            status = agent_status(
                None,
                owner_missing=True,
                unknown_tools=(),
                schedule=None,
                previous=agent.status,
                generation=agent.generation,
                now=now,
            )
            return AgentReconciled(None, status, spec_patch)
        definition = agent_row.definition_of(
            agent.uid, agent.namespace, agent.name, agent.spec, model_name
        )
        if owed.get(owed_spec.ENABLED_FIELD) is False:
            definition = agent_row.AgentDefinition(**{**definition.__dict__, "enabled": False})
        if not owner.active and definition.enabled:
            # Owner deactivation writes the owner's own switch (seed 000: no third lock).
            definition = agent_row.AgentDefinition(**{**definition.__dict__, "enabled": False})
            spec_patch["enabled"] = False
        agent_id, created, schedule_changed = agent_row.upsert_agent(
            session, definition, owner.user_id, row
        )
        if agent.spec.wake_on_reply is not None:
            # The owner's consent, as the portal writes it: the spec wins over the CLI's.
            agent_row.mirror_wake_on_reply(session, agent_id, agent.spec.wake_on_reply)
        unknown_tools = agent_links.link_tools(
            session, agent_id, definition.tool_names, inserted=created
        )
        if unknown_tools:
            # A tool created while this reconcile linked: found now, or it finds this
            # agent awaiting it (recorded below, in this transaction).
            unknown_tools = agent_links.link_awaited_tools(session, agent_id, unknown_tools)
        agent_links.record_unknown_tools(
            session, agent_id, unknown_tools, row.unknown_tools if row is not None else None
        )
        status_row = agent_row.settle_slot_and_status(
            session, agent_id, start, reset=schedule_changed
        )
        missing_model = None
        if model_name is not None and not status_row.locks.has_model:
            if agent_links.link_named_model(session, agent_id, model_name):
                # Created while this reconcile wrote the row: settle with it.
                status_row = agent_row.settle_slot_and_status(
                    session, agent_id, start, reset=schedule_changed
                )
            else:
                missing_model = model_name
    status = agent_status(
        status_row,
        owner_missing=False,
        unknown_tools=unknown_tools,
        missing_model=missing_model,
        schedule=definition.schedule,
        previous=agent.status,
        generation=agent.generation,
        now=now,
    )
    return AgentReconciled(agent_id, status, spec_patch)


def forget_agent(database: Database, uid: str) -> int | None:
    """The CR is gone: remove the row; its runs and links cascade. The old id, if any."""
    with database.transaction() as session:
        return agent_row.delete_agent_by_uid(session, uid)
