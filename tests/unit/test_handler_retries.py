"""Retries of failed kopf event handlers (handlers/retries.py on runtime/retries.py): keyed
by the object, never by its body; backing off; superseded by a success that began after
they were asked for; never run at the same time as kopf's handling of the same object.
An Agent's are its workqueue's rate-limited re-add instead (handlers/agents.py), so the
queue alone orders an Agent's handlings, and a requeue is a put on it."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import cast

from achilles.db.journal.catalogue import AgentRef
from achilles.handlers.agent_queue import (
    AgentToRead,
    QueuedAgent,
    QueuedAgentEvent,
    object_key,
    requeue_agents,
)
from achilles.handlers.agents import handle_queued
from achilles.handlers.context import RuntimeContext
from achilles.k8s.objects import ObjectRef
from achilles.runtime.backoff import MOST_DELAY
from achilles.runtime.retries import Retries
from achilles.runtime.workqueue import WorkQueue
from achilles.services.agent_events import AgentEvent

# A kopf handler's name among the retries (the catalogue's, e.g. `model_changed`).
HANDLER = "model_changed"

AGENT = ObjectRef("Agent", "agents", "daily", "team", "uid-1")
OTHER = ObjectRef("Agent", "agents", "weekly", "team", "uid-2")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_failure_is_retried_with_a_doubling_delay_up_to_a_minute() -> None:
    clock = Clock()
    retries = Retries(clock, key_of=object_key)
    delays = [retries.failed(HANDLER, AGENT) for _ in range(9)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, MOST_DELAY, MOST_DELAY, MOST_DELAY]
    assert len(retries) == 1  # one entry per object, however often it failed
    assert retries.due() == []
    clock.now += MOST_DELAY
    (due,) = retries.due()
    assert (due.handler, due.ref, due.attempts) == (HANDLER, AGENT, 9)


def test_a_success_supersedes_the_retry_of_that_object_only() -> None:
    clock = Clock()
    retries = Retries(clock, key_of=object_key)
    retries.failed(HANDLER, AGENT)
    retries.failed(HANDLER, OTHER)
    retries.succeeded(HANDLER, AGENT, retries.begun())
    clock.now += 10
    assert [retry.ref for retry in retries.due()] == [OTHER]
    # The backoff starts again after a success.
    assert retries.failed(HANDLER, AGENT) == 1.0


def test_the_retry_holds_the_object_and_nothing_of_the_event() -> None:
    clock = Clock()
    retries = Retries(clock, key_of=object_key)
    retries.failed("model_changed", ObjectRef("AgentModel", "agentmodels", "gpt", None, "u"))
    clock.now += 1
    (pending,) = retries.due()
    assert set(vars(pending)) == {"handler", "ref", "attempts", "due", "stamp"}


def test_handling_and_a_retry_of_one_object_take_the_same_lock() -> None:
    retries = Retries(Clock(), key_of=object_key)
    lock = retries.object_lock(AGENT)
    assert retries.object_lock(ObjectRef("Agent", "agents", "daily", "team", "uid-1")) is lock
    entered = threading.Event()

    def handle() -> None:
        with lock:
            entered.set()

    with lock:
        thread = threading.Thread(target=handle)
        thread.start()
        assert not entered.wait(0.2)  # waits while the other handling runs
    thread.join(5)
    assert entered.is_set()


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


def _failing_context(clock: Clock) -> tuple[RuntimeContext, WorkQueue[str, QueuedAgent]]:
    """The Agent's read from the API server fails (the handling's first step)."""
    queue: WorkQueue[str, QueuedAgent] = WorkQueue(clock)

    def unreachable(ref: ObjectRef) -> None:
        raise ConnectionError("the API server is down")

    context = SimpleNamespace(agent_queue=queue, resources=SimpleNamespace(read_object=unreachable))
    return cast(RuntimeContext, context), queue


def _listed(ref: ObjectRef, generation: int) -> QueuedAgentEvent:
    assert ref.uid is not None
    assert ref.namespace is not None
    event = AgentEvent(ref.uid, ref.namespace, ref.name, generation, False, {}, {}, {})
    return QueuedAgentEvent(None, event)


def test_a_failed_agent_handling_is_its_queues_rate_limited_re_add() -> None:
    clock = Clock()
    context, queue = _failing_context(clock)
    queue.put("uid-1", AgentToRead(AGENT))
    for delay in (1.0, 2.0, 4.0):
        taken = queue.take(0)
        assert taken == ("uid-1", AgentToRead(AGENT))
        handle_queued(context, taken[1])  # fails: logged, not raised
        queue.done("uid-1")
        assert queue.retrying("uid-1")
        clock.now += delay - 0.5
        assert queue.take(0) is None  # not before its backoff is over
        clock.now += 0.5
    assert queue.take(0) == ("uid-1", AgentToRead(AGENT))  # read afresh on its turn


def test_an_agent_re_add_replaces_an_older_event_still_waiting() -> None:
    # Nothing older than the afresh read can be handled after it.
    clock = Clock()
    context, queue = _failing_context(clock)
    queue.put("uid-1", AgentToRead(AGENT))
    taken = queue.take(0)
    assert taken is not None
    handle_queued(context, taken[1])
    queue.done("uid-1")
    queue.put("uid-1", _listed(AGENT, 1))  # an event came meanwhile
    clock.now += 1
    assert queue.take(0) == ("uid-1", AgentToRead(AGENT))
    assert queue.take(0) is None
