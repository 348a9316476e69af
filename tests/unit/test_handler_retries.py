"""Retries of failed handlings (handlers/agents.py, handlers/catalogue.py): kopf does not
retry `on.event` handlers, so a failed reconcile is its workqueue's rate-limited re-add
(runtime/workqueue.py): the object, never its event, read afresh once its backoff is
over; the queue alone orders an object's handlings; a requeue is a put on the queue. An MCP
AgentTool whose server did not answer is listed again the same way until a listing works."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from achilles.db.database import Database
from achilles.db.journal.catalogue import AgentRef
from achilles.domain.agent_event import AgentEvent
from achilles.domain.mcp_tools import listing_retried
from achilles.domain.vocabulary import ConditionReason, EventReason, EventType
from achilles.handlers import agents, catalogue
from achilles.handlers.agent_queue import (
    AgentToRead,
    QueuedAgent,
    QueuedAgentEvent,
    requeue_agents,
)
from achilles.handlers.agents import AgentReconciler
from achilles.handlers.catalogue import CatalogueReconciler
from achilles.handlers.catalogue_queue import (
    CatalogueEvent,
    CatalogueKey,
    CatalogueToRead,
    QueuedCatalogue,
)
from achilles.handlers.context import Handles, StatusMarks
from achilles.handlers.discovery import report_discovery
from achilles.handlers.statuses import WrittenStatuses
from achilles.k8s.jobs import RunJobs
from achilles.k8s.objects import ObjectRef, Resources
from achilles.runtime.workqueue import WorkQueue
from achilles.services.mcp_sources import Discovery, Notice

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


def _agent_context(clock: Clock) -> tuple[AgentReconciler, WorkQueue[str, QueuedAgent]]:
    """The Agent's read from the API server fails (the handling's first step); nothing
    else it holds is reached."""
    queue: WorkQueue[str, QueuedAgent] = WorkQueue(clock)
    resources = SimpleNamespace(read_object=_unreachable)
    reconciler = AgentReconciler(
        database=cast(Database, None),
        resources=cast(Resources, resources),
        jobs=cast(RunJobs, None),
        queue=queue,
        settled_agents=None,
        written=WrittenStatuses(),
        marks=cast(StatusMarks, None),
        emit=lambda signal: None,
    )
    return reconciler, queue


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
) -> tuple[CatalogueReconciler, WorkQueue[CatalogueKey, QueuedCatalogue]]:
    queue: WorkQueue[CatalogueKey, QueuedCatalogue] = WorkQueue(clock)
    resources = SimpleNamespace(read_object=read_object)
    reconciler = CatalogueReconciler(
        database=cast(Database, None),
        resources=cast(Resources, resources),
        namespace="achilles-runs",
        queue=queue,
        agent_queue=WorkQueue(clock),
        emit=lambda signal: None,
    )
    return reconciler, queue


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

    def model_changed(context: CatalogueReconciler, event: CatalogueEvent) -> None:
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


TOOL = ObjectRef("AgentTool", "agenttools", "time", None, "uid-t")
TOOL_KEY = ("AgentTool", "time")


@pytest.mark.parametrize(
    ("reason", "retried"),
    [
        ("ServerUnreachable", True),  # down, starting, refused, timed out: may answer soon
        ("CredentialsUnavailable", False),  # waits for the admin's Secret or RBAC
        ("ToolsListed", False),
        ("InvalidSpec", False),
        ("Mirrored", False),
        (None, False),  # never listed
    ],
)
def test_only_an_unanswered_listing_is_retried_without_an_edit(
    reason: str | None, retried: bool
) -> None:
    assert listing_retried(reason) is retried


def _tool_body(ready_reason: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "time", "uid": "uid-t", "generation": 1},
        "spec": {"implementation": "mcp"},
        "status": {"observedGeneration": 1, "conditions": [{"type": "Ready",
                                                            "reason": ready_reason}]},
    }  # fmt: skip


def _handle(context: CatalogueReconciler, queue: WorkQueue[CatalogueKey, QueuedCatalogue]) -> None:
    taken = queue.take(0)
    assert taken is not None
    catalogue.handle_queued(context, taken[1])
    queue.done(taken[0])


def test_an_unanswered_listing_is_retried_with_backoff_until_one_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A stand-in for the tool's reconcile: the server answers at the third listing.
    handled: list[CatalogueEvent] = []
    answers = iter([False, False, True])

    def tool_changed(context: CatalogueReconciler, event: CatalogueEvent) -> catalogue.Reconciled:
        handled.append(event)
        if event.relist or not handled[:-1]:  # a retry, or the spec's first listing
            up = next(answers)
            return catalogue.Reconciled.DONE if up else catalogue.Reconciled.LISTING_OWED
        return catalogue.Reconciled.LISTING_OWED  # an echo of the unreachable status

    monkeypatch.setitem(catalogue.RECONCILERS, "AgentTool", tool_changed)
    clock = Clock()
    context, queue = _catalogue_context(clock, lambda ref: _tool_body("ServerUnreachable"))
    queue.put(TOOL_KEY, CatalogueEvent(TOOL, "ADDED", {"name": "time"}, {}, {}))
    _handle(context, queue)  # the server is down: a listing retry waits 1 s
    assert queue.retrying(TOOL_KEY)
    # The echo of the status write: the retry already waits; none added, none forgotten.
    queue.put(TOOL_KEY, CatalogueEvent(TOOL, "MODIFIED", {"name": "time"}, {}, {}))
    _handle(context, queue)
    assert queue.take(0) is None
    clock.now += 1
    _handle(context, queue)  # the retry: read afresh and listed again; still down
    assert (handled[-1].relist, handled[-1].type) == (True, None)
    assert handled[-1].meta["generation"] == 1
    clock.now += 1
    assert queue.take(0) is None  # the second retry waits 2 s, not 1
    clock.now += 1
    _handle(context, queue)  # the server answers: forgotten
    assert handled[-1].relist
    assert not queue.retrying(TOOL_KEY)
    assert len(handled) == 4


def test_a_listing_that_works_meanwhile_settles_the_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The relist pass (or an edit) listed the server while a retry waited: the status
    # says ToolsListed, and its echo forgets the retry.
    verdicts = iter([catalogue.Reconciled.LISTING_OWED, catalogue.Reconciled.DONE])
    monkeypatch.setitem(catalogue.RECONCILERS, "AgentTool", lambda context, e: next(verdicts))
    clock = Clock()
    context, queue = _catalogue_context(clock, lambda ref: _tool_body("ToolsListed"))
    queue.put(TOOL_KEY, CatalogueEvent(TOOL, None, {"name": "time"}, {}, {}))
    _handle(context, queue)
    assert queue.retrying(TOOL_KEY)
    queue.put(TOOL_KEY, CatalogueEvent(TOOL, "MODIFIED", {"name": "time"}, {}, {}))
    _handle(context, queue)
    assert not queue.retrying(TOOL_KEY)
    clock.now += 60
    assert queue.take(0) is None


def test_a_retried_listing_warns_once_per_verdict() -> None:
    # A server that stays down is listed again and again: one Warning, until its error
    # or the verdict changes.
    posted: list[tuple[str, str]] = []
    written: list[dict[str, Any]] = []

    def patch_status(ref: ObjectRef, status: dict[str, Any]) -> bool:
        written.append(status)
        return True

    resources = SimpleNamespace(
        post_event=lambda ref, type, reason, message: posted.append((reason, message)),
        patch_status=patch_status,
    )
    context = cast(Handles, SimpleNamespace(resources=resources))

    def report(message: str, ready: bool = False) -> None:
        reason = ConditionReason.TOOLS_LISTED if ready else ConditionReason.SERVER_UNREACHABLE
        notice = Notice(EventType.WARNING, EventReason.MCP_SERVER_UNREACHABLE, message)
        previous = written[-1] if written else {}
        found = Discovery(ready, reason, message, {"source": "mcp"}, None if ready else notice)
        report_discovery(context, TOOL, 1, previous, found, 7)

    report("cannot reach http://127.0.0.1:9/mcp: ConnectError")
    report("cannot reach http://127.0.0.1:9/mcp: ConnectError")  # a retry, still down
    assert [message for _, message in posted] == [
        "cannot reach http://127.0.0.1:9/mcp: ConnectError"
    ]
    report("no answer from http://127.0.0.1:9/mcp within 5 s")  # another error: said
    assert len(posted) == 2
    report("1 of 1 tool(s) allowed", ready=True)
    report("cannot reach http://127.0.0.1:9/mcp: ConnectError")  # down again: said
    assert len(posted) == 3
