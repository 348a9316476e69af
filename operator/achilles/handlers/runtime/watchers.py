"""The pod and Job watchers: what Kubernetes says about run pods and Jobs is folded into
the journal (services/outcomes.py): a failed, evicted or OOM-killed pod, a Job stopped
at its deadline. Each lists, then watches; a watch that ends is listed and watched again.
"""

from __future__ import annotations

from achilles.handlers.runtime import events
from achilles.handlers.runtime.context import RuntimeContext
from achilles.services import outcomes

WATCH_TIMEOUT_SECONDS = 300
RESTART_AFTER_ERROR = 2.0


def run_pods(context: RuntimeContext) -> None:
    while not context.stop.is_set():
        if context.run_pass("pod-watch", lambda: follow_pods(context)) is None:
            context.stop.wait(RESTART_AFTER_ERROR)


def run_jobs(context: RuntimeContext) -> None:
    while not context.stop.is_set():
        if context.run_pass("job-watch", lambda: follow_jobs(context)) is None:
            context.stop.wait(RESTART_AFTER_ERROR)


def follow_pods(context: RuntimeContext) -> bool:
    """List (nothing is missed while no watch ran), then watch until it times out."""
    deadline = context.config.start_deadline
    events.run_failures(
        context, outcomes.fold_listing(context.database, context.jobs, start_deadline=deadline)
    )
    for pod in context.jobs.watch_pods(WATCH_TIMEOUT_SECONDS):
        if context.stop.is_set():
            break
        failed = outcomes.fold_pod(context.database, context.jobs, pod, start_deadline=deadline)
        if failed is not None:
            events.run_failures(context, [failed])
    return True


def follow_jobs(context: RuntimeContext) -> bool:
    deadline = context.config.start_deadline
    for job in context.jobs.watch_jobs(WATCH_TIMEOUT_SECONDS):
        if context.stop.is_set():
            break
        failed = outcomes.fold_job(context.database, job, context.jobs, start_deadline=deadline)
        if failed is not None:
            events.run_failures(context, [failed])
    return True
