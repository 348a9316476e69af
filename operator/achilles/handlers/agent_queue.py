"""What the Agent workqueue holds, and how the other handlers have an Agent read again.

The Agent handler (agents.py) puts an Agent's event there, or, for a retry (the queue's
rate-limited re-add) or a requeue, the Agent to read afresh; its threads reconcile one
Agent at a time. The catalogue's handlers and the sweeper requeue the Agents a model or
a tool changed (`requeue_agents`): put on the queue at once, each is handled after any
handling of it under way, so a requeue is never lost to a handling that read the world
before the change.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from achilles.domain.agent_event import AgentEvent
from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.kinds import AGENT
from achilles.runtime.workqueue import WorkQueue
from achilles.services.catalogue import AgentRef


def agent_ref(name: str, namespace: str, uid: str | None) -> ObjectRef:
    return ObjectRef(AGENT.kind, AGENT.plural, name, namespace, uid)


@dataclass(frozen=True)
class QueuedAgentEvent:
    """An Agent event waiting on the workqueue: kopf's event type (None: listed) and
    what the reconcile reads of the object."""

    type: str | None
    event: AgentEvent

    @property
    def ref(self) -> ObjectRef:
        return agent_ref(self.event.name, self.event.namespace, self.event.uid)


@dataclass(frozen=True)
class AgentToRead:
    """A retry or requeue of an Agent waiting on the workqueue: the Agent is read afresh
    from the API server when its turn comes."""

    ref: ObjectRef


QueuedAgent = QueuedAgentEvent | AgentToRead


def requeue_agents(queue: WorkQueue[str, QueuedAgent], agents: Iterable[AgentRef]) -> None:
    """Have these Agents read again and reconciled, through the workqueue: something
    they name was created or deleted (a model, a tool), with no event of their own.
    Rows of no CR (none has a uid) are skipped."""
    for agent in agents:
        if agent.uid and agent.namespace and agent.name:
            ref = agent_ref(agent.name, agent.namespace, agent.uid)
            queue.put(agent.uid, AgentToRead(ref))
