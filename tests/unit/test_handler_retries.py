"""Retries of failed kopf event handlers (handlers/retries.py on runtime/retries.py): keyed by the
object, never by its body; backing off; superseded by a success that began after they
were asked for; never run at the same time as kopf's handling of the same object; and,
for Agents, put on the Agent workqueue so that it alone orders an Agent's handlings."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import cast

from achilles.db.journal.catalogue import AgentRef
from achilles.handlers.agent_queue import (
    AGENT_RECONCILE,
    AgentToRead,
    QueuedAgent,
    QueuedAgentEvent,
    object_key,
    requeue_agents,
)
from achilles.handlers.context import RuntimeContext
from achilles.handlers.retries import fire_due_retries, handle
from achilles.k8s.objects import ObjectRef
from achilles.runtime.retries import MOST_DELAY, Retries
from achilles.runtime.workqueue import WorkQueue
from achilles.services.agent_events import AgentEvent

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
    delays = [retries.failed(AGENT_RECONCILE, AGENT) for _ in range(9)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, MOST_DELAY, MOST_DELAY, MOST_DELAY]
    assert len(retries) == 1  # one entry per object, however often it failed
    assert retries.due() == []
    clock.now += MOST_DELAY
    (due,) = retries.due()
    assert (due.handler, due.ref, due.attempts) == (AGENT_RECONCILE, AGENT, 9)


def test_a_success_supersedes_the_retry_of_that_object_only() -> None:
    clock = Clock()
    retries = Retries(clock, key_of=object_key)
    retries.failed(AGENT_RECONCILE, AGENT)
    retries.failed(AGENT_RECONCILE, OTHER)
    retries.succeeded(AGENT_RECONCILE, AGENT, retries.begun())
    clock.now += 10
    assert [retry.ref for retry in retries.due()] == [OTHER]
    # The backoff starts again after a success.
    assert retries.failed(AGENT_RECONCILE, AGENT) == 1.0


def test_the_retry_holds_the_object_and_nothing_of_the_event() -> None:
    clock = Clock()
    retries = Retries(clock, key_of=object_key)
    retries.failed("model_changed", ObjectRef("AgentModel", "agentmodels", "gpt", None, "u"))
    clock.now += 1
    (pending,) = retries.due()
    assert set(vars(pending)) == {"handler", "ref", "attempts", "due", "stamp", "handed_over"}


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


def test_a_requeue_is_due_at_once_and_leaves_a_pending_retry_in_its_place() -> None:
    clock = Clock()
    retries = Retries(clock, key_of=object_key)
    retries.requeue(AGENT_RECONCILE, AGENT)
    (due,) = retries.due()
    assert (due.ref, due.attempts) == (AGENT, 0)
    retries.succeeded(AGENT_RECONCILE, AGENT, retries.begun())
    # A failing object keeps its backoff: a requeue does not hurry it.
    retries.failed(AGENT_RECONCILE, OTHER)
    retries.requeue(AGENT_RECONCILE, OTHER)
    assert retries.due() == []
    clock.now += 1
    assert [(retry.ref, retry.attempts) for retry in retries.due()] == [(OTHER, 1)]


def test_agents_requeued_by_a_catalogue_change_are_read_again_by_their_handler() -> None:
    # A tool deleted or created, a model created: the agents it changed, by their rows.
    retries = Retries(Clock(), key_of=object_key)
    requeue_agents(
        retries,
        [
            AgentRef(1, "uid-1", "team", "daily"),
            AgentRef(2, None, None, None),  # a row of no CR: nothing to read again
            AgentRef(3, "uid-2", "team", "weekly"),
        ],
    )
    assert sorted((retry.handler, retry.ref.name) for retry in retries.due()) == [
        (AGENT_RECONCILE, "daily"),
        (AGENT_RECONCILE, "weekly"),
    ]
    assert {retry.ref for retry in retries.due()} == {AGENT, OTHER}


def test_a_requeue_asked_for_while_a_handling_runs_outlives_its_success() -> None:
    # The handling may have read the database before the model it lacked was created:
    # its success must not drop the requeue that the model's creation asked for.
    retries = Retries(Clock(), key_of=object_key)
    retries.failed(AGENT_RECONCILE, AGENT)
    begun = retries.begun()
    retries.requeue(AGENT_RECONCILE, AGENT)
    retries.succeeded(AGENT_RECONCILE, AGENT, begun)
    assert len(retries) == 1
    # A handling that began after the requeue does supersede it.
    retries.succeeded(AGENT_RECONCILE, AGENT, retries.begun())
    assert len(retries) == 0


def _agent_context(
    retries: Retries[ObjectRef],
) -> tuple[RuntimeContext, WorkQueue[str, QueuedAgent]]:
    queue: WorkQueue[str, QueuedAgent] = WorkQueue()

    def no_api_read(ref: ObjectRef) -> None:
        raise AssertionError(f"the sweeper read {ref.name}: a queued retry reads on its turn")

    resources = SimpleNamespace(read_object=no_api_read)
    context = SimpleNamespace(retries=retries, agent_queue=queue, resources=resources)
    return cast(RuntimeContext, context), queue


def _listed(ref: ObjectRef, generation: int) -> QueuedAgentEvent:
    assert ref.uid is not None
    assert ref.namespace is not None
    event = AgentEvent(ref.uid, ref.namespace, ref.name, generation, False, {}, {}, {})
    return QueuedAgentEvent(None, event)


def test_an_agent_retry_goes_on_the_workqueue_after_an_older_event_there() -> None:
    clock = Clock()
    retries = Retries(clock, key_of=object_key)
    context, queue = _agent_context(retries)
    assert AGENT.uid is not None
    queue.put(AGENT.uid, _listed(AGENT, 1))  # an older event, not taken yet
    retries.failed(AGENT_RECONCILE, AGENT)
    clock.now += 1

    assert fire_due_retries(context) == 1  # put on the queue, not read on this thread

    # The queue holds one item for the Agent, the retry's afresh read, which replaced the
    # older event: nothing older can be handled after it.
    assert queue.take(0) == (AGENT.uid, AgentToRead(AGENT))
    assert queue.take(0) is None
    # Pending but handed over: not fired again while the queue holds it.
    assert len(retries) == 1
    clock.now += MOST_DELAY
    assert retries.due() == []
    assert fire_due_retries(context) == 0


def test_a_handed_over_retry_that_fails_again_keeps_backing_off() -> None:
    clock = Clock()
    retries = Retries(clock, key_of=object_key)
    context, queue = _agent_context(retries)
    for _ in range(3):
        retries.failed(AGENT_RECONCILE, AGENT)  # 1, 2, then 4 s
    clock.now += 4
    fire_due_retries(context)
    taken = queue.take(0)
    assert taken is not None

    def fails() -> None:
        raise ConnectionError("database is down")

    handle(context, AGENT_RECONCILE, AGENT, fails)  # as the workqueue's thread does
    queue.done(taken[0])
    clock.now += 7.5
    assert retries.due() == []  # the fourth failure: 8 s
    clock.now += 0.5
    assert [retry.attempts for retry in retries.due()] == [4]
    fire_due_retries(context)
    taken = queue.take(0)
    assert taken is not None
    handle(context, AGENT_RECONCILE, AGENT, lambda: None)  # the database is back
    queue.done(taken[0])
    assert len(retries) == 0
    # And the backoff starts again after that success.
    assert retries.failed(AGENT_RECONCILE, AGENT) == 1.0


def test_a_requeue_of_an_agent_whose_retry_is_on_the_queue_reads_it_once_more() -> None:
    clock = Clock()
    retries = Retries(clock, key_of=object_key)
    context, queue = _agent_context(retries)
    retries.requeue(AGENT_RECONCILE, AGENT)
    fire_due_retries(context)
    taken = queue.take(0)
    assert taken is not None
    begun = retries.begun()  # its handling began, before the model came
    retries.requeue(AGENT_RECONCILE, AGENT)  # a model it names was created meanwhile
    retries.succeeded(AGENT_RECONCILE, AGENT, begun)
    queue.done(taken[0])
    assert fire_due_retries(context) == 1
    assert queue.take(0) == (AGENT.uid, AgentToRead(AGENT))
