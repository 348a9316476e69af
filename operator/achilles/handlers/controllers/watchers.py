"""The pod and Job watchers: what Kubernetes says about run pods and Jobs is folded into
the journal (services/outcomes.py): a failed, evicted or OOM-killed pod, a Job stopped
at its deadline. Each lists once, then watches; a watch that ends resumes where it was
(services/run_objects.py keeps what they saw; the sweeper reads it); one that failed is
resumed after the runtime's backoff (`LoopHandle.drive`; the manager's table declares
it short: a watch's events wait for it, and a resume is one request).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from achilles.db.database import Database
from achilles.handlers import events
from achilles.handlers.context import StatusMarks
from achilles.handlers.signals import Happened
from achilles.k8s.objects import Resources
from achilles.runtime.backoff import Backoff
from achilles.runtime.manager import LoopHandle
from achilles.services.run_objects import RunObjects

# A failed watch resumed after 1 s, then 2 s while it keeps failing (the manager's table).
RETRY = Backoff(1.0, 2.0)


@dataclass(frozen=True)
class Watchers:
    """The pod and Job watchers' reconciler, with exactly what they use (handlers/
    manager.py builds it): the run objects they fold into (the journal through it), the
    journal's database and the API server (a failed run's Event on its Agent), the
    status marks (that Agent's status follows), and `emit` (a pod gone wakes the
    dispatcher)."""

    run_objects: RunObjects
    database: Database
    resources: Resources
    marks: StatusMarks
    emit: Callable[[Happened], None]

    def follow_pods(self, stop: threading.Event) -> bool:
        """One pass: list if nothing is known yet, then watch until the watch ends. A
        run's pod gone wakes the dispatcher: its agent's next run may have waited for it."""
        self.run_objects.follow_pods(
            stop,
            lambda failed: events.run_failures(self, failed),
            gone=lambda: self.emit(Happened.DISPATCHABLE),
        )
        return True

    def follow_jobs(self, stop: threading.Event) -> bool:
        self.run_objects.follow_jobs(stop, lambda failed: events.run_failures(self, failed))
        return True


def run_pods(reconciler: Watchers, loop: LoopHandle) -> None:
    """A watch ended is resumed at once; a failed one after the runtime's backoff."""
    loop.drive(lambda: 0.0 if reconciler.follow_pods(loop.stop) else None)


def run_jobs(reconciler: Watchers, loop: LoopHandle) -> None:
    loop.drive(lambda: 0.0 if reconciler.follow_jobs(loop.stop) else None)
