"""Asking for a run of an agent, behind one small interface.

On a cluster a run is requested the Kubernetes way, by a new value of the Agent's
run-request annotation (`achilles.k8s.annotations`); the operator turns each value into
one manual run. Whoever asks — the CLI's wake-on-reply, later the operator itself — goes
through a `RunRequester`, so the asking code never knows about API clients and tests can
pass a fake.

Standalone installs (no cluster) and operations enqueue straight into the journal
instead, through the same start gates (`enqueue_run`).

The owner's settings that live in the Agent's spec (`wakeOnReply`) are written the same
way, through an `AgentSpecWriter`, when the CLI changes them for an agent with a resource.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from achilles.errors import InvalidInputError, StartRefused

if TYPE_CHECKING:
    from achilles.db.database import Database
    from achilles.db.journal.runs import EnqueueResult
    from achilles.domain.runs import RunTrigger
    from achilles.services.idempotency import Once


class RunRequester(Protocol):
    def request(self, namespace: str, name: str, at: datetime) -> str:
        """Request a run of Agent `namespace/name` made at `at`; return the request's value.

        Raises `NotFound` when the Agent does not exist and `ClusterUnavailable` when
        the request cannot be delivered.
        """
        ...


class RunCanceller(Protocol):
    def cancel(self, namespace: str, name: str, run_id: int) -> str:
        """Request that Agent `namespace/name`'s run `run_id` be cancelled
        (`achilles.io/cancel-run`); the value written. Errors as `RunRequester.request`."""
        ...


class KubernetesRunRequester:
    """Writes the run-request (and cancel) annotation through the kubeconfig's (or the
    pod's) cluster: a `RunRequester` and a `RunCanceller`."""

    def __init__(self, kubeconfig: Path | None = None) -> None:
        self.kubeconfig = kubeconfig

    def request(self, namespace: str, name: str, at: datetime) -> str:
        # Imported here: the Kubernetes client is heavy, and most callers never request.
        from achilles.k8s.run_request import request_run

        return request_run(namespace, name, at, kubeconfig=self.kubeconfig)

    def cancel(self, namespace: str, name: str, run_id: int) -> str:
        from achilles.k8s.run_request import request_cancel

        return request_cancel(namespace, name, run_id, kubeconfig=self.kubeconfig)


def enqueue_run(database: Database, agent_ref: str, trigger: RunTrigger) -> EnqueueResult:
    """A run of the agent (id or name) through the start gates, directly in the journal.

    A closed durable lock raises `StartRefused` and writes no row; a run skipped by a
    runtime gate (budget, another run active) is recorded as such.
    """
    # Imported here: the journal's start gates pull in the schedule models (pydantic),
    # which `achilles inbox reply` (a RunRequester user) does without.
    from achilles.db.journal import runs as journal
    from achilles.db.journal.agents import find_agent_id

    with database.transaction() as session:
        return journal.enqueue_run(session, find_agent_id(session, agent_ref), trigger)


def request_owned_run(
    database: Database,
    requester: RunRequester,
    namespace: str,
    name: str,
    owner_key: str,
    at: datetime,
    *,
    once: Once[str] | None = None,
) -> str:
    """A manual run of `owner_key`'s Agent `namespace/name`, asked for the way
    `achilles run-now` asks (`requester`); the request's value.

    `NotFound` when the agent is not the owner's (or does not exist: the two read the
    same); `StartRefused` up front while a durable lock is closed (switched off, paused,
    no model, owner inactive), the refusal the operator would record. A runtime gate
    (budget, a run already active) is the operator's to apply: the run is recorded as
    skipped. With `once` (an `Idempotency-Key`), the key is claimed before the request
    and its response recorded in the same transaction: a retry, here or on another
    replica, replays the first response (`Replayed`) and requests nothing.
    """
    from achilles.services.journal_reads import find_agent

    view = find_agent(database, namespace, name, owner_key=owner_key)
    if view.closed_locks:
        raise StartRefused(view.agent.id, tuple(str(lock) for lock in view.closed_locks))
    if once is None:
        return requester.request(namespace, name, at)
    with database.transaction() as session:
        once.claim(session)
        request_key = requester.request(namespace, name, at)
        once.record(session, request_key)
    return request_key


@dataclass(frozen=True)
class CancelAnswer:
    run_id: int
    agent: str  # namespace/name
    requested: bool  # False: the run had ended, nothing was asked
    state: str
    reason: str | None


def request_owned_cancel(
    database: Database, canceller: RunCanceller, run_id: int, owner_key: str | None
) -> CancelAnswer:
    """Ask the operator to cancel `owner_key`'s run (None: an admin's, any run) the way
    the portal does, through its Agent's `achilles.io/cancel-run`; the operator ends it
    and deletes its Job (`services/run_cancel.py`). A run that ended already is not
    asked about (`requested` False: nothing changes). `NotFound` when the run is not the
    owner's; `InvalidInputError` when its agent has no Agent resource to carry the request
    (an agent made in the database: `achilles runs cancel` cancels those)."""
    from achilles.domain.runs import ACTIVE_STATES
    from achilles.services.journal_reads import find_run

    found = find_run(database, run_id, owner_key=owner_key)
    agent, run = found.agent, found.run
    ref = f"{agent.namespace}/{agent.cr_name}"
    if run.state not in ACTIVE_STATES:
        return CancelAnswer(run_id, ref, False, run.state, run.reason)
    if agent.namespace is None or agent.cr_name is None:
        raise InvalidInputError(
            f"run {run_id}'s agent has no Agent resource to ask through;"
            " an admin cancels it with `achilles runs cancel`"
        )
    canceller.cancel(agent.namespace, agent.cr_name, run_id)
    return CancelAnswer(run_id, ref, True, run.state, run.reason)


class AgentSpecWriter(Protocol):
    def write(self, namespace: str, name: str, fields: dict[str, object]) -> None:
        """Merge `fields` (CR spelling) into Agent `namespace/name`'s spec.

        Raises `NotFound` when the Agent does not exist and `ClusterUnavailable` when
        the write cannot be delivered.
        """
        ...


class KubernetesAgentSpecWriter:
    """Patches the Agent through the kubeconfig's (or the pod's) cluster."""

    def __init__(self, kubeconfig: Path | None = None) -> None:
        self.kubeconfig = kubeconfig

    def write(self, namespace: str, name: str, fields: dict[str, object]) -> None:
        from achilles.k8s.agent_spec import patch_spec

        patch_spec(namespace, name, dict(fields), kubeconfig=self.kubeconfig)
