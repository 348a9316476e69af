"""The Agent workqueue's threads: each takes an Agent's newest waiting event and
reconciles it (`handlers.agents.handle_queued`), one thread per Agent at a time.

Woken by the queue itself (a put notifies one waiting thread); owns nothing but the
event it holds. kopf's event loop puts there what it cannot settle from memory (a
change, a new Agent, a listed Agent that does not agree with its row); a failure is
retried by the sweeper, re-reading the object (runtime/retries.py). Events still waiting
when the operator stops are not lost: the next start lists every Agent again.
"""

from __future__ import annotations

from achilles.handlers.agents import handle_queued
from achilles.handlers.runtime.context import RuntimeContext

# As many as kopf's threads for the other handlers: a reconcile is mostly Python under
# one GIL with a few short statements, so more threads only wait (operator.py).
THREADS = 4
# How long a thread waits for an event before it looks at the stop flag again.
TAKE_SECONDS = 1.0


def run(context: RuntimeContext) -> None:
    queue = context.agent_queue
    while not context.stop.is_set():
        taken = queue.take(TAKE_SECONDS)
        if taken is None:
            continue
        uid, queued = taken
        try:
            handle_queued(context, queued)  # a failure is logged and retried, not raised
        finally:
            queue.done(uid)
