"""The operator's loops: which loop runs on which thread, started and stopped together.

kopf runs the per-object handlers (handlers/agents.py, handlers/catalogue.py) on its
event loop and worker threads, but for the Agent events it cannot settle at once, which
go to the Agent workqueue's threads here (`agents-N`); what is not about one object runs
here too, one thread per loop, each in its own module under controllers/. Every loop is
safe with two replicas because the database decides (row locks, SKIP LOCKED, the
dispatch advisory lock, the one-active-run and request-key indexes). The threads
themselves are the generic runtime's (runtime/loops.py).
"""

from __future__ import annotations

from collections.abc import Callable

from achilles.handlers import agents
from achilles.handlers.agent_queue import QueuedAgent
from achilles.handlers.context import RuntimeContext
from achilles.handlers.controllers import (
    dispatcher,
    listener,
    notifier,
    scheduler,
    status_writer,
    sweeper,
    watchers,
)
from achilles.runtime.loops import Loops
from achilles.runtime.workqueue import process

SHUTDOWN_SECONDS = 5.0


def agent_worker(context: RuntimeContext) -> None:
    """One of the Agent workqueue's threads: each takes an Agent's newest waiting event
    and reconciles it (`agents.handle_queued`, which logs and retries a failure), one
    thread per Agent at a time. Events still waiting when the operator stops are not
    lost: the next start lists every Agent again."""

    def handle(queued: QueuedAgent) -> None:
        agents.handle_queued(context, queued)

    process(context.agent_queue, handle, context.stop, agents.TAKE_SECONDS)


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
    **{f"agents-{i}": agent_worker for i in range(agents.THREADS)},
}
# A watch stream wakes only at its next event and holds nothing between events: not
# waited for at shutdown (the next leader lists before it watches).
UNJOINED = frozenset({"pod-watch", "job-watch"})


class Runtime:
    """The loops of one operator process, on one `RuntimeContext`."""

    def __init__(self, context: RuntimeContext) -> None:
        self.context = context
        # Shutdown sets the wakes the loops sleep on, so each sees the stop at once.
        wakes = (
            context.schedule_wake,
            context.dispatch_wake,
            context.status_wake,
            context.notify_wake,
        )
        self.loops = Loops(context, LOOPS, stop=context.stop, wakes=wakes, unjoined=UNJOINED)

    def start(self) -> None:
        self.loops.start()

    def shutdown(self) -> None:
        """Let the loops finish the pass they are in (a pass is one short transaction),
        within SHUTDOWN_SECONDS in all; the threads are daemons and end with the process."""
        self.loops.shutdown(SHUTDOWN_SECONDS)
