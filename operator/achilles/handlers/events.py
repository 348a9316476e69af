"""The Events the controllers post about runs, on the run's Agent (kubectl describe agent)."""

from __future__ import annotations

from collections.abc import Iterable

from achilles.domain.vocabulary import EventReason, EventType
from achilles.handlers import metrics
from achilles.handlers.agent_queue import agent_ref
from achilles.handlers.context import Handles, MarkingHandles
from achilles.services import dispatch, outcomes, status


def on_agent(
    context: Handles, agent_id: int, kind: EventType, reason: EventReason, message: str
) -> None:
    for row in status.agent_rows(context.database, [agent_id]):
        if row.namespace and row.cr_name:
            ref = agent_ref(row.cr_name, row.namespace, row.uid)
            context.resources.post_event(ref, kind, reason, message)


def on_dispatched(
    context: Handles,
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
    context: MarkingHandles, run_id: int, kind: EventType, reason: EventReason, message: str
) -> None:
    """On the Agent of a run that ended: its status follows."""
    owner = status.run_owner(context.database, run_id)
    if owner is not None and owner.namespace and owner.cr_name:
        ref = agent_ref(owner.cr_name, owner.namespace, owner.uid)
        context.resources.post_event(ref, kind, reason, message)
        context.marks.mark_dirty([owner.agent_id])


def run_failures(context: MarkingHandles, failed: Iterable[outcomes.FailedRun]) -> None:
    """Runs the operator failed (their pod or Job said so, or their Job vanished)."""
    for run in failed:
        metrics.RUNS_FINISHED.labels(run.reason).inc()
        message = f"run {run.run_id} failed: {run.error}"
        on_run(context, run.run_id, EventType.WARNING, EventReason.RUN_FAILED, message)
