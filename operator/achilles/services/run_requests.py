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

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from achilles.errors import StartRefused

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


class KubernetesRunRequester:
    """Writes the run-request annotation through the kubeconfig's (or the pod's) cluster."""

    def __init__(self, kubeconfig: Path | None = None) -> None:
        self.kubeconfig = kubeconfig

    def request(self, namespace: str, name: str, at: datetime) -> str:
        # Imported here: the Kubernetes client is heavy, and most callers never request.
        from achilles.k8s.run_request import request_run

        return request_run(namespace, name, at, kubeconfig=self.kubeconfig)


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
    from achilles.services.owner_reads import find_agent

    view = find_agent(database, namespace, name, owner_key)
    if view.closed_locks:
        raise StartRefused(view.agent.id, tuple(str(lock) for lock in view.closed_locks))
    if once is None:
        return requester.request(namespace, name, at)
    with database.transaction() as session:
        once.claim(session)
        request_key = requester.request(namespace, name, at)
        once.record(session, request_key)
    return request_key


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
