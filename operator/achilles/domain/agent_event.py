"""An Agent event as the operator reads it, what it asks, and what its reconcile
decides: the run and cancel requests its annotations carry, whether it is the operator's
own status write coming back (`is_own_status_echo`), the digest a listed Agent is
known by when its row and status already agree with it, and the reconciliation the
handler applies. Pure: the reconcile of an Agent event (services/agent_events.py) reads
the event through it; the intake's snapshot (services/agent_intake.py) computes the same
digest from the rows.

A request value is read here; the annotations' names, and how a value is written, are the
Kubernetes side's (k8s/annotations.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from achilles.domain.runs import RunState
from achilles.domain.schedule import Schedule, schedule_to_db
from achilles.domain.vocabulary import ConditionType, EventReason, EventType

# A request value is short (an RFC 3339 time); anything longer is not ours to honour.
MAX_REQUEST_VALUE_LENGTH = 64
# What a reconcile writes into the status besides the run request's own fields.
STATUS_KEYS = (
    "phase",
    "conditions",
    "scheduleSummary",
    "observedGeneration",
    "databaseId",
    "nextRunAt",
    "lastRun",
    "weeklyTokens",
)
_VIEW_KEYS = tuple(key for key in STATUS_KEYS if key not in ("conditions", "observedGeneration"))


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
    """A Kubernetes Event to post on the Agent."""

    kind: EventType
    reason: EventReason
    message: str


@dataclass
class AgentReconciliation:
    """What the reconcile of an Agent event decided (services/agent_events.py); the
    handler applies it: the spec patch, the Events, the status, the wakes."""

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


# --- the requests (DESIGN.md §2: each new value of the annotation is one request) ---


def parse_run_request(value: str | None) -> str | None:
    """The request a value carries, or None when there is none or it is not one.

    Any non-empty value up to `MAX_REQUEST_VALUE_LENGTH` is a request (a portal may
    write its own request ids); the value itself is the request's identity.
    """
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > MAX_REQUEST_VALUE_LENGTH:
        return None
    return value


def parse_cancel_request(value: str | None) -> str | None:
    """The cancel request a value carries (compared with the last one handled), or None."""
    return parse_run_request(value)


def cancel_run_id(request: str) -> int | None:
    """The run a cancel request names: a decimal run id, else None (not a request we can
    honour; the operator says so once)."""
    return int(request) if request.isdigit() and len(request) <= 18 else None


def is_own_status_echo(
    event_type: str | None,
    meta: Mapping[str, Any],
    status: Mapping[str, Any],
    *,
    run_request: str | None,
    cancel_request: str | None,
) -> bool:
    """An update of a Ready Agent whose spec the operator already reconciled (its
    generation is the status's observedGeneration) and whose run request it already
    handled: the operator's own status write coming back as a watch event, what
    controller-runtime's GenerationChanged and AnnotationChanged predicates filter out.
    Reconciling it again would change nothing but cost a transaction per event.
    `run_request` and `cancel_request`: the values of its run-request and cancel
    annotations (k8s/annotations.py names them), None when it has none.

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
    request = parse_run_request(run_request)
    if request is not None and request != status.get("lastHandledRunRequest"):
        return False
    cancel = parse_cancel_request(cancel_request)
    return cancel is None or cancel == status.get("lastHandledCancelRequest")


# --- the digest of a listed Agent (the intake, services/agent_intake.py) ---


class ListedSpec(Protocol):
    """The fields of an Agent's parsed spec that its row mirrors (k8s/resources/agent.py's
    `AgentSpec` has them)."""

    @property
    def owner(self) -> str: ...
    @property
    def display_name(self) -> str | None: ...
    @property
    def description(self) -> str | None: ...
    @property
    def prompt(self) -> str: ...
    @property
    def schedule(self) -> Schedule | None: ...
    @property
    def model(self) -> str | None: ...
    @property
    def tools(self) -> Sequence[str]: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def admin_paused(self) -> bool: ...
    @property
    def max_run_tokens(self) -> int | None: ...
    @property
    def suspend_after_failures(self) -> int | None: ...


def cr_digest(event: AgentEvent, spec: ListedSpec) -> bytes | None:
    """The digest of what a reconcile of the Agent as listed would write and show, when
    its status has observed its generation; None when it has not (or was never
    reconciled). The intake's row digest is the same, from the row's side."""
    status = event.status
    generation = event.generation
    if generation is None or status.get("databaseId") is None:
        return None
    if status.get("observedGeneration") != generation:
        return None
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    if any(
        c.get("observedGeneration") != generation
        for c in conditions
        if c.get("type") != ConditionType.RUN_REQUEST_ACCEPTED
    ):
        return None
    definition = [
        event.uid,
        event.namespace,
        event.name,
        spec.display_name or event.name,
        spec.description,
        spec.prompt,
        schedule_to_db(spec.schedule) if spec.schedule is not None else None,
        spec.model,
        sorted(set(spec.tools)),
        spec.enabled,
        spec.admin_paused,
        spec.owner,
        spec.max_run_tokens,
        spec.suspend_after_failures,
    ]
    return definition_digest(definition, status_view(status))


def kept_status(previous: Mapping[str, Any]) -> dict[str, Any]:
    """The status a reconcile of an unchanged Agent would write: the one it has (its
    run-request condition is the caller's, as after a reconcile)."""
    kept = {key: previous.get(key) for key in STATUS_KEYS}
    kept["conditions"] = [
        c
        for c in previous.get("conditions") or []
        if c.get("type") != ConditionType.RUN_REQUEST_ACCEPTED
    ]
    return kept


def status_view(status: Mapping[str, Any]) -> list[Any]:
    """What a status shows, without when its conditions last moved (kept while their
    status stays) and without the generation (checked against the CR's own)."""
    conditions = [
        [c.get("type"), c.get("status"), c.get("reason"), c.get("message")]
        for c in status.get("conditions") or []
        if isinstance(c, Mapping) and c.get("type") != ConditionType.RUN_REQUEST_ACCEPTED
    ]
    return [[_without_nulls(status.get(key)) for key in _VIEW_KEYS], conditions]


def definition_digest(definition: list[Any], view: list[Any]) -> bytes:
    """An Agent's definition (as its row holds it) and status view, in 16 bytes."""
    payload = json.dumps([definition, view], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(payload.encode(), digest_size=16).digest()


def _without_nulls(value: Any) -> Any:
    """A merge patch drops null fields, so a status read back has none: neither side
    keeps them (the status's own fields hold objects one level deep)."""
    if isinstance(value, Mapping):
        return {k: v for k, v in value.items() if v is not None}
    return value
