"""The operator's runtime: which loop runs on which thread, started and stopped together.

kopf runs the per-object handlers (handlers/agents.py, handlers/catalogue.py) on its
event loop and worker threads, but for the Agent events it cannot settle at once, which
go to the Agent workqueue's threads here (agent_workers.py); what is not about one
object runs here too, one thread per loop, each in its own module. Every loop is safe
with two replicas because the database decides (row locks, SKIP LOCKED, the dispatch
advisory lock, the one-active-run and request-key indexes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from achilles.handlers.runtime import (
    agent_workers,
    dispatcher,
    listener,
    notifier,
    scheduler,
    status_writer,
    sweeper,
    watchers,
)
from achilles.handlers.runtime.context import RuntimeContext

SHUTDOWN_SECONDS = 5.0

# thread name -> the loop it runs (each module's docstring says what wakes it and what
# it owns).
LOOPS: dict[str, Callable[[RuntimeContext], None]] = {
    "listener": listener.run,
    "scheduler": scheduler.run,
    "dispatcher": dispatcher.run,
    "pod-watch": watchers.run_pods,
    "job-watch": watchers.run_jobs,
    "sweeper": sweeper.run,
    "status": status_writer.run,
    "notifier": notifier.run,
    **{f"agents-{i}": agent_workers.run for i in range(agent_workers.THREADS)},
}
# A watch stream wakes only at its next event and holds nothing between events: not
# waited for at shutdown (the next leader lists before it watches).
UNJOINED = frozenset({"pod-watch", "job-watch"})


class Runtime:
    def __init__(self, context: RuntimeContext) -> None:
        self.context = context
        self.threads: dict[str, threading.Thread] = {}

    def start(self) -> None:
        for name, loop in LOOPS.items():
            thread = threading.Thread(
                target=loop, args=(self.context,), name=f"achilles-{name}", daemon=True
            )
            thread.start()
            self.threads[name] = thread

    def shutdown(self) -> None:
        """Let the loops finish the pass they are in (a pass is one short transaction),
        within SHUTDOWN_SECONDS in all; the threads are daemons and end with the process."""
        context = self.context
        context.stop.set()
        wakes = (context.schedule_wake, context.dispatch_wake, context.status_wake)
        for wake in (*wakes, context.notify_wake):
            wake.set()
        deadline = time.monotonic() + SHUTDOWN_SECONDS
        for name, thread in self.threads.items():
            if name not in UNJOINED:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
