"""Retries of failed kopf event handlers (handlers/runtime/retries.py): keyed by the
object, never by its body; backing off; superseded by a success; and never run at the
same time as kopf's handling of the same object."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import cast

from achilles.db.journal.catalogue import AgentRef
from achilles.handlers.agents import requeue_agents
from achilles.handlers.runtime.context import RuntimeContext
from achilles.handlers.runtime.retries import MOST_DELAY, Retries
from achilles.k8s.objects import ObjectRef

AGENT = ObjectRef("Agent", "agents", "daily", "team", "uid-1")
OTHER = ObjectRef("Agent", "agents", "weekly", "team", "uid-2")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_failure_is_retried_with_a_doubling_delay_up_to_a_minute() -> None:
    clock = Clock()
    retries = Retries(clock)
    delays = [retries.failed("agent_changed", AGENT) for _ in range(9)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, MOST_DELAY, MOST_DELAY, MOST_DELAY]
    assert len(retries) == 1  # one entry per object, however often it failed
    assert retries.due() == []
    clock.now += MOST_DELAY
    (due,) = retries.due()
    assert (due.handler, due.ref, due.attempts) == ("agent_changed", AGENT, 9)


def test_a_success_supersedes_the_retry_of_that_object_only() -> None:
    clock = Clock()
    retries = Retries(clock)
    retries.failed("agent_changed", AGENT)
    retries.failed("agent_changed", OTHER)
    retries.succeeded("agent_changed", AGENT)
    clock.now += 10
    assert [retry.ref for retry in retries.due()] == [OTHER]
    # The backoff starts again after a success.
    assert retries.failed("agent_changed", AGENT) == 1.0


def test_the_retry_holds_the_object_and_nothing_of_the_event() -> None:
    clock = Clock()
    retries = Retries(clock)
    retries.failed("model_changed", ObjectRef("AgentModel", "agentmodels", "gpt", None, "u"))
    clock.now += 1
    (pending,) = retries.due()
    assert set(vars(pending)) == {"handler", "ref", "attempts", "due"}


def test_handling_and_a_retry_of_one_object_take_the_same_lock() -> None:
    retries = Retries(Clock())
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
    retries = Retries(clock)
    retries.requeue("agent_changed", AGENT)
    (due,) = retries.due()
    assert (due.ref, due.attempts) == (AGENT, 0)
    retries.succeeded("agent_changed", AGENT)
    # A failing object keeps its backoff: a requeue does not hurry it.
    retries.failed("agent_changed", OTHER)
    retries.requeue("agent_changed", OTHER)
    assert retries.due() == []
    clock.now += 1
    assert [(retry.ref, retry.attempts) for retry in retries.due()] == [(OTHER, 1)]


def test_agents_requeued_by_a_catalogue_change_are_read_again_by_their_handler() -> None:
    # A tool deleted or created, a model created: the agents it changed, by their rows.
    retries = Retries(Clock())
    context = cast(RuntimeContext, SimpleNamespace(retries=retries))
    requeue_agents(
        context,
        [
            AgentRef(1, "uid-1", "team", "daily"),
            AgentRef(2, None, None, None),  # a row of no CR: nothing to read again
            AgentRef(3, "uid-2", "team", "weekly"),
        ],
    )
    assert sorted((retry.handler, retry.ref.name) for retry in retries.due()) == [
        ("agent_changed", "daily"),
        ("agent_changed", "weekly"),
    ]
    assert {retry.ref for retry in retries.due()} == {AGENT, OTHER}
