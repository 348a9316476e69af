"""Retries of failed handlings (handlers/agents.py, handlers/catalogue.py): kopf does not
retry `on.event` handlers, so a failed reconcile is its workqueue's rate-limited re-add
(runtime/workqueue.py): the object, never its event, read afresh once its backoff is
over; the queue alone orders an object's handlings; a requeue is a put on the queue."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from achilles.db.journal.catalogue import AgentRef
from achilles.handlers import agents, catalogue
from achilles.handlers.agent_queue import (
    AgentToRead,
    QueuedAgent,
    QueuedAgentEvent,
    requeue_agents,
)
from achilles.handlers.catalogue_queue import (
    CatalogueEvent,
    CatalogueKey,
    CatalogueToRead,
    QueuedCatalogue,
)
from achilles.handlers.context import RuntimeContext
from achilles.k8s.objects import ObjectRef
from achilles.runtime.workqueue import WorkQueue
from achilles.services.agent_events import AgentEvent

AGENT = ObjectRef("Agent", "agents", "daily", "team", "uid-1")
OTHER = ObjectRef("Agent", "agents", "weekly", "team", "uid-2")
MODEL = ObjectRef("AgentModel", "agentmodels", "gpt", None, "uid-m")
MODEL_KEY = ("AgentModel", "gpt")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_agents_requeued_by_a_catalogue_change_are_put_on_the_workqueue_to_read() -> None:
    # A tool deleted or created, a model created: the agents it changed, by their rows.
    queue: WorkQueue[str, QueuedAgent] = WorkQueue()
    requeue_agents(
        queue,
        [
            AgentRef(1, "uid-1", "team", "daily"),
            AgentRef(2, None, None, None),  # a row of no CR: nothing to read again
            AgentRef(3, "uid-2", "team", "weekly"),
        ],
    )
    assert queue.take(0) == ("uid-1", AgentToRead(AGENT))
    assert queue.take(0) == ("uid-2", AgentToRead(OTHER))
    assert queue.take(0) is None


def _unreachable(ref: ObjectRef) -> None:
    raise ConnectionError("the API server is down")


def _agent_context(clock: Clock) -> tuple[RuntimeContext, WorkQueue[str, QueuedAgent]]:
    """The Agent's read from the API server fails (the handling's first step)."""
    queue: WorkQueue[str, QueuedAgent] = WorkQueue(clock)
    resources = SimpleNamespace(read_object=_unreachable)
    context = SimpleNamespace(agent_queue=queue, resources=resources)
    return cast(RuntimeContext, context), queue


def _listed(ref: ObjectRef, generation: int) -> QueuedAgentEvent:
    assert ref.uid is not None
    assert ref.namespace is not None
    event = AgentEvent(ref.uid, ref.namespace, ref.name, generation, False, {}, {}, {})
    return QueuedAgentEvent(None, event)


def test_a_failed_agent_handling_is_its_queues_rate_limited_re_add() -> None:
    clock = Clock()
    context, queue = _agent_context(clock)
    queue.put("uid-1", AgentToRead(AGENT))
    for delay in (1.0, 2.0, 4.0):
        taken = queue.take(0)
        assert taken == ("uid-1", AgentToRead(AGENT))
        agents.handle_queued(context, taken[1])  # fails: logged, not raised
        queue.done("uid-1")
        assert queue.retrying("uid-1")
        clock.now += delay - 0.5
        assert queue.take(0) is None  # not before its backoff is over
        clock.now += 0.5
    assert queue.take(0) == ("uid-1", AgentToRead(AGENT))  # read afresh on its turn


def test_an_agent_re_add_replaces_an_older_event_still_waiting() -> None:
    # Nothing older than the afresh read can be handled after it.
    clock = Clock()
    context, queue = _agent_context(clock)
    queue.put("uid-1", AgentToRead(AGENT))
    taken = queue.take(0)
    assert taken is not None
    agents.handle_queued(context, taken[1])
    queue.done("uid-1")
    queue.put("uid-1", _listed(AGENT, 1))  # an event came meanwhile
    clock.now += 1
    assert queue.take(0) == ("uid-1", AgentToRead(AGENT))
    assert queue.take(0) is None


def _catalogue_context(
    clock: Clock, read_object: Any
) -> tuple[RuntimeContext, WorkQueue[CatalogueKey, QueuedCatalogue]]:
    queue: WorkQueue[CatalogueKey, QueuedCatalogue] = WorkQueue(clock)
    resources = SimpleNamespace(read_object=read_object)
    context = SimpleNamespace(catalogue_queue=queue, resources=resources)
    return cast(RuntimeContext, context), queue


def test_a_failed_catalogue_handling_is_re_added_as_the_object_to_read() -> None:
    clock = Clock()
    context, queue = _catalogue_context(clock, _unreachable)
    queue.put(MODEL_KEY, CatalogueToRead(MODEL))
    taken = queue.take(0)
    assert taken is not None
    catalogue.handle_queued(context, taken[1])  # the read fails: logged, not raised
    queue.done(MODEL_KEY)
    assert queue.take(0) is None
    clock.now += 1
    # The retry holds the object and nothing of the event.
    assert queue.take(0) == (MODEL_KEY, CatalogueToRead(MODEL))


def test_a_catalogue_object_gone_before_its_retry_is_handled_as_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handled: list[CatalogueEvent] = []

    def model_changed(context: RuntimeContext, event: CatalogueEvent) -> None:
        handled.append(event)

    monkeypatch.setitem(catalogue.RECONCILERS, "AgentModel", model_changed)
    context, queue = _catalogue_context(Clock(), lambda ref: None)
    queue.add_rate_limited(MODEL_KEY, CatalogueToRead(MODEL))  # an earlier failure
    queue.put(MODEL_KEY, CatalogueToRead(MODEL))
    taken = queue.take(0)
    assert taken is not None
    catalogue.handle_queued(context, taken[1])
    queue.done(MODEL_KEY)
    (event,) = handled
    assert (event.type, event.meta) == ("DELETED", {"name": "gpt", "uid": "uid-m"})
    assert not queue.retrying(MODEL_KEY)  # the success settled the earlier re-add
