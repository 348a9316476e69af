"""The Events the loops post about runs, on the run's Agent (kubectl describe agent)."""

from __future__ import annotations

from collections.abc import Iterable

from achilles.db.journal.status import agent_status_rows, run_owners
from achilles.domain.vocabulary import EventReason, EventType
from achilles.handlers import metrics
from achilles.handlers.runtime.context import RuntimeContext
from achilles.k8s.objects import ObjectRef
from achilles.k8s.resources.kinds import AGENT
from achilles.services import dispatch, outcomes


def agent_ref(name: str, namespace: str, uid: str | None) -> ObjectRef:
    return ObjectRef(AGENT.kind, AGENT.plural, name, namespace, uid)


def on_agent(
    context: RuntimeContext, agent_id: int, kind: EventType, reason: EventReason, message: str
) -> None:
    with context.database.transaction() as session:
        rows = agent_status_rows(session, [agent_id])
    for row in rows:
        if row.namespace and row.cr_name:
            ref = agent_ref(row.cr_name, row.namespace, row.uid)
            context.resources.post_event(ref, kind, reason, message)


def on_dispatched(
    context: RuntimeContext,
    run: dispatch.DispatchableRun,
    kind: EventType,
    reason: EventReason,
    message: str,
) -> None:
    """On the Agent of a run the dispatcher took (its row may be gone)."""
    if run.agent_name and run.agent_namespace:
        ref = agent_ref(run.agent_name, run.agent_namespace, run.agent_uid)
        context.resources.post_event(ref, kind, reason, message)


def on_run(
    context: RuntimeContext, run_id: int, kind: EventType, reason: EventReason, message: str
) -> None:
    """On the Agent of a run that ended: its status follows."""
    with context.database.transaction() as session:
        owner = run_owners(session, [run_id]).get(run_id)
    if owner is not None and owner.namespace and owner.cr_name:
        ref = agent_ref(owner.cr_name, owner.namespace, owner.uid)
        context.resources.post_event(ref, kind, reason, message)
        context.mark_dirty([owner.agent_id])


def run_failures(context: RuntimeContext, failed: Iterable[outcomes.FailedRun]) -> None:
    """Runs the operator failed (their pod or Job said so, or their Job vanished)."""
    for run in failed:
        metrics.RUNS_FINISHED.labels(run.reason).inc()
        message = f"run {run.run_id} failed: {run.error}"
        on_run(context, run.run_id, EventType.WARNING, EventReason.RUN_FAILED, message)
