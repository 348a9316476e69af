"""The pod and Job watchers: what Kubernetes says about run pods and Jobs is folded into
the journal (services/outcomes.py): a failed, evicted or OOM-killed pod, a Job stopped
at its deadline. Each lists once, then watches; a watch that ends resumes where it was
(services/run_objects.py keeps what they saw; the sweeper reads it).
"""

from __future__ import annotations

from achilles.handlers import events
from achilles.handlers.context import RuntimeContext
from achilles.handlers.signals import Happened

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
    """One pass: list if nothing is known yet, then watch until the watch ends. A run's
    pod gone wakes the dispatcher: its agent's next run may have waited for it."""
    context.run_objects.follow_pods(
        context.stop,
        lambda failed: events.run_failures(context, failed),
        gone=lambda: context.wakes.emit(Happened.DISPATCHABLE),
    )
    return True


def follow_jobs(context: RuntimeContext) -> bool:
    context.run_objects.follow_jobs(
        context.stop, lambda failed: events.run_failures(context, failed)
    )
    return True
