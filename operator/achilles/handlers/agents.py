"""Agent handlers: every event makes the row, the status and run requests agree with the CR.

The decision is services/agent_events.py's (the Agent's use case, one module); this
module reads the event (domain/agent_event.py's `AgentEvent`), asks, and applies the
answer (spec patch, Events, status, wakes).

The Agents' own list+watch (k8s/agent_watch.py, client-go's reflector without its
cache, as for run pods and Jobs) hands every event to `on_agent_event`, on its thread:
kopf's per-object machinery (a task, a memory, a cause, a logger and the handler's
kwargs for each event) was most of the CPU of a restart's listing, for handlers that
used none of it (`achilles bench intake`, docs/performance.md). The operator's own status
write coming back, and a listed Agent that already agrees with its row and status (most
of them, when the operator starts), are settled there from memory, read from the raw
body: no statement, no API call. Everything else is put, as the few fields the
reconcile reads (an `AgentEvent`), on the Agent workqueue (runtime/workqueue.py), and
the body goes with its page or event instead of being held until a thread is free
(when kopf's handler waited for a thread, every Agent waiting held its whole body: at a
first intake of 100,000 Agents, arriving faster than the threads reconcile them, that
was 2 GiB). The workqueue's
threads (`THREADS`, started by manager.py) reconcile through the database
(`handle_queued`), one thread per Agent at a time. A failure is the queue's rate-limited
re-add (1 s, doubling to 60 s), and a requeue (a model or tool the Agent names came or
went) a put: either goes on the same workqueue as an `AgentToRead`, and the thread reads
the Agent afresh when its turn comes, so the queue alone orders an Agent's handlings.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from achilles.db.database import Database
from achilles.domain.agent_event import AgentEvent, AgentReconciliation, is_own_status_echo
from achilles.domain.agent_status import journal_view, needs_patch
from achilles.handlers import metrics
from achilles.handlers.agent_queue import (
    AgentToRead,
    QueuedAgent,
    QueuedAgentEvent,
    agent_ref,
)
from achilles.handlers.context import RuntimeContext, StatusMarks
from achilles.handlers.signals import Happened
from achilles.handlers.statuses import StatusQueue, WrittenStatuses
from achilles.k8s.annotations import CANCEL_RUN, RUN_REQUESTED_AT
from achilles.k8s.custom_watch import custom_watch
from achilles.k8s.jobs import RunJobs
from achilles.k8s.objects import ObjectRef, Resources
from achilles.k8s.resources.kinds import AGENT
from achilles.k8s.watching import Change, ListWatch, Page, follow_until
from achilles.runtime.manager import LoopHandle
from achilles.runtime.synced import Synced
from achilles.runtime.workqueue import WorkQueue
from achilles.services.agent_events import reconcile_agent_event, settled_from_memory
from achilles.services.agent_intake import SettledAgents

log = logging.getLogger("achilles.operator")


# The workqueue's threads: a reconcile is mostly Python under one GIL with a few short
# statements, so more threads only wait.
THREADS = 4
# The longest the Agents' listing waits for the catalogue's (a catalogue kind's listing
# waits catalogue_watch.SYNC_SECONDS for its objects to be mirrored; a kind that cannot be
# listed, the API server refusing it, holds the Agents this long).
CATALOGUE_SYNC_SECONDS = 60.0
# How long a thread waits for an event before it looks at the stop flag again.
TAKE_SECONDS = 1.0
# The reconcile's name in the log.
RECONCILE = "agent_reconcile"


@dataclass(frozen=True)
class AgentReconciler:
    """An Agent's reconcile, with exactly what it uses (`reconciler_of` builds it for the
    workqueue's threads, handlers/manager.py, and for what the agent watch settles from
    memory): the journal's database, the API server (the Agent read afresh, its spec,
    status and Events), the Jobs client (a removed Agent's Jobs, a cancelled run's), the
    Agent workqueue (a failure's re-add), the rows' digests a listed Agent is checked
    against, the statuses written, the status marks and `emit` (runs to dispatch)."""

    database: Database
    resources: Resources
    jobs: RunJobs
    queue: WorkQueue[str, QueuedAgent]
    settled_agents: SettledAgents | None
    written: WrittenStatuses
    marks: StatusMarks
    emit: Callable[[Happened], None]


def reconciler_of(context: RuntimeContext) -> AgentReconciler:
    return AgentReconciler(
        context.database,
        context.resources,
        context.jobs,
        context.agent_queue,
        context.settled_agents,
        context.written_statuses,
        context.marks,
        context.wakes.emit,
    )


@dataclass(frozen=True)
class AgentWatch:
    """The Agents' list+watch and what its events need (`watch_of` builds it for the
    agent-watch loop, handlers/manager.py): the reconciler (its queue, its digests, what
    an Agent settled at once applies), the status queue (an echo the status writer
    asked to reconcile) and the catalogue's first listings (`catalogue_synced`: the
    models and tools an Agent names are mirrored before the Agents are listed)."""

    watch: ListWatch[dict[str, Any]]
    reconciler: AgentReconciler
    statuses: StatusQueue
    catalogue_synced: Synced


def watch_of(context: RuntimeContext) -> AgentWatch:
    return AgentWatch(
        custom_watch(context.resources, AGENT),
        reconciler_of(context),
        context.statuses,
        context.catalogue_synced,
    )


def follow_agents(agents: AgentWatch, stop: threading.Event) -> bool:
    """One pass of the Agents' list+watch: list them when nothing is known yet (a start,
    or the API server no longer has the version: every Agent comes as listed, type
    None), then watch until the stream ends (True: the next pass resumes where it was).
    An API server that failed raises; the next pass resumes from the last event taken,
    so none is lost."""
    listed, since = 0, time.monotonic()

    def page(item: Page[dict[str, Any]]) -> None:
        nonlocal listed, since
        if item.first:
            listed, since = 0, time.monotonic()
        listed += len(item.items)
        for body in item.items:
            on_agent_event(agents, None, body)
        if item.last:
            log.info("%d Agent(s) listed in %.1f s, %d to reconcile", listed,
                     time.monotonic() - since, len(agents.reconciler.queue))  # fmt: skip

    def change(item: Change[dict[str, Any]]) -> None:
        on_agent_event(agents, item.type, item.item)

    follow_until(agents.watch, stop, page, change)
    return True


def run_watch(agents: AgentWatch, loop: LoopHandle) -> None:
    """First the catalogue's first listings, mirrored (CATALOGUE_SYNC_SECONDS at
    most): an Agent listed before its AgentModel was mirrored would be refused a run
    its model allows ("no model"). Then a watch ended is resumed at once; a failed one
    after the runtime's backoff."""
    if not agents.catalogue_synced.wait(CATALOGUE_SYNC_SECONDS):
        pending = ", ".join(sorted(agents.catalogue_synced.pending()))
        log.warning("the Agents listed before the catalogue (%s not listed yet)", pending)
    loop.drive(lambda: 0.0 if follow_agents(agents, loop.stop) else None)


def on_agent_event(agents: AgentWatch, type: str | None, body: Mapping[str, Any]) -> None:
    """One Agent event (type None: listed), on the agent-watch thread: settled at once
    when it is the operator's own status coming back or a listed Agent that already
    agrees with its row and status (no statement, no API call), else put on the Agent
    workqueue as the few fields the reconcile reads."""
    reconciler = agents.reconciler
    uid = body["metadata"]["uid"]
    # With an older event of this Agent still waiting, this one replaces it whatever it
    # is: settled here, it would be followed by the older one's handling.
    waiting = reconciler.queue.waiting(uid)
    if not waiting and _is_echo(agents.statuses, type, body):
        metrics.AGENT_EVENTS.labels("modified", "echo").inc()
        return
    agent = _read_event(type, body)
    settled_agents = reconciler.settled_agents
    if not waiting and type is None and settled_agents is not None:
        settled = settled_from_memory(reconciler.database, agent, settled_agents)
        if settled is not None:
            metrics.AGENT_EVENTS.labels("listed", "unchanged").inc()
            ref = agent_ref(agent.name, agent.namespace, agent.uid)
            _apply(reconciler, ref, dict(agent.status), settled)
            return
    reconciler.queue.put(uid, QueuedAgentEvent(type, agent))


def handle_queued(reconciler: AgentReconciler, queued: QueuedAgent) -> None:
    """Reconcile what was taken from the workqueue, on a workqueue thread: an event, or
    the Agent read afresh for a retry or a requeue. A failure is the queue's rate-limited
    re-add of the Agent, read afresh when its backoff is over; a success forgets it."""
    ref = queued.ref
    assert ref.uid is not None  # the queue is keyed by uid
    try:
        _reconcile(reconciler, _event_of(reconciler, queued))
    except Exception as exc:
        delay = reconciler.queue.add_rate_limited(ref.uid, AgentToRead(ref))
        log.warning(
            "%s of %s %s failed (%s); retried in %.0f s", RECONCILE, ref.kind, ref.name, exc, delay
        )
    else:
        reconciler.queue.forget(ref.uid)


def _event_of(reconciler: AgentReconciler, queued: QueuedAgent) -> QueuedAgentEvent:
    if isinstance(queued, QueuedAgentEvent):
        return queued
    ref = queued.ref
    body = reconciler.resources.read_object(ref)
    if body is not None:  # handled as a listed object: in full
        return QueuedAgentEvent(None, _read_event(None, body))
    # Gone meanwhile: handled as its deletion.
    meta = {"uid": ref.uid, "namespace": ref.namespace, "name": ref.name}
    return QueuedAgentEvent("DELETED", _read_event("DELETED", {"metadata": meta}))


def _reconcile(reconciler: AgentReconciler, queued: QueuedAgentEvent) -> None:
    event = queued.event
    kind = "listed" if queued.type is None else queued.type.lower()
    # A listed Agent (the listing at start, or a retry's fresh read) may already agree.
    settled = reconciler.settled_agents if queued.type is None else None
    reconciliation = reconcile_agent_event(reconciler.database, event, settled)
    metrics.AGENT_EVENTS.labels(
        kind, "unchanged" if reconciliation.unchanged else "reconciled"
    ).inc()
    if reconciliation.removed:
        _remove(reconciler, event, reconciliation.agent_id)
    else:
        _apply(reconciler, queued.ref, dict(event.status), reconciliation)


def _is_echo(statuses: StatusQueue, type: str | None, body: Mapping[str, Any]) -> bool:
    """The operator's own status write coming back, unless the status writer asked for
    a reconcile of the agent: told on the agent watch's thread, from the raw body, with no
    thread hop (most events, once the operator runs, are these)."""
    meta, status = body["metadata"], body.get("status") or {}
    annotations = meta.get("annotations") or {}
    echo = is_own_status_echo(
        type,
        meta,
        status,
        run_request=annotations.get(RUN_REQUESTED_AT),
        cancel_request=annotations.get(CANCEL_RUN),
    )
    return echo and not statuses.take_reconcile(status["databaseId"])


def _read_event(type: str | None, body: Mapping[str, Any]) -> AgentEvent:
    """What the reconcile reads of an Agent, from its raw body: it keeps the spec, the
    status and the annotations, and lets the rest of the body (most of it
    `managedFields`) go with its page or event. (When kopf handed the Agents over,
    resolving every field through its views was a quarter of the handler's time at a
    start's listing: a py-spy profile of `achilles bench intake`.)"""
    meta = body["metadata"]
    return AgentEvent(
        uid=meta["uid"],
        namespace=meta["namespace"],
        name=meta["name"],
        generation=meta.get("generation"),
        deleted=type == "DELETED" or bool(meta.get("deletionTimestamp")),
        spec=body.get("spec") or {},
        status=body.get("status") or {},
        annotations=meta.get("annotations") or {},
    )


def _remove(reconciler: AgentReconciler, event: AgentEvent, agent_id: int | None) -> None:
    if agent_id is None:
        return
    reconciler.written.forget(agent_id)
    reconciler.jobs.delete_for_agents([agent_id])
    log.info(
        "agent %s/%s removed (row %s, its runs and Jobs)", event.namespace, event.name, agent_id
    )


def _apply(
    reconciler: AgentReconciler,
    ref: ObjectRef,
    previous: dict[str, Any],
    reconciliation: AgentReconciliation,
) -> None:
    resources = reconciler.resources
    if reconciliation.spec_patch:
        assert ref.namespace is not None  # Agents are namespaced
        resources.patch_agent_spec(ref.namespace, ref.name, reconciliation.spec_patch)
    for posted in reconciliation.events:
        resources.post_event(ref, posted.kind, posted.reason, posted.message)
    if reconciliation.request_outcome is not None:
        metrics.RUN_REQUESTS.labels(reconciliation.request_outcome).inc()
    if reconciliation.request_outcome == "refused":
        metrics.count_refused("manual", reconciliation.refused_locks)
    if reconciliation.enqueued is not None:
        state, reason = reconciliation.enqueued
        metrics.count_enqueued("manual", state, reason)
    if reconciliation.delete_job_of is not None:
        # A cancelled run's Job, after its pods (foreground propagation): the run holds
        # its agent until the Job is gone, and then ends (the Job watcher).
        reconciler.jobs.delete(reconciliation.delete_job_of, foreground=True)
    if reconciliation.wake_dispatcher:
        reconciler.emit(Happened.DISPATCHABLE)
    agent_id = reconciliation.agent_id
    if reconciliation.journal_moved and agent_id is not None:
        reconciler.marks.mark_dirty([agent_id])
    desired = reconciliation.status
    if desired is None:
        return
    if needs_patch(previous, desired):
        metrics.count_status_patch("reconcile", resources.patch_status(ref, desired))
    if agent_id is not None:  # the status writer patches from here on
        reconciler.written.record(agent_id, journal_view(desired))
