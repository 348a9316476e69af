"""The listener: the journal's NOTIFYs wake the other loops at once.

A run inserted or changing state (payload: its agent id) wakes the dispatcher and marks
the agent's status; a `next_run_at` changing wakes the scheduler; a notification written
to the outbox wakes the notifier. The loops tick on their
own too, so a lost connection delays work, never loses it.
"""

from __future__ import annotations

from achilles.db.notifications import OUTBOX_CHANNEL, RUNS_CHANNEL, SCHEDULE_CHANNEL, listen
from achilles.handlers.runtime.context import RuntimeContext


def run(context: RuntimeContext) -> None:
    def on_notify(channel: str, payload: str) -> None:
        if channel == RUNS_CHANNEL:
            context.dispatch_wake.set()
            if payload.isdigit():
                context.mark_dirty([int(payload)])
        elif channel == SCHEDULE_CHANNEL:
            context.schedule_wake.set()
        elif channel == OUTBOX_CHANNEL:
            context.notify_wake.set()

    def on_connected() -> None:
        # Connected again after an outage: what was missed meanwhile is looked at now.
        context.schedule_wake.set()
        context.dispatch_wake.set()
        context.notify_wake.set()

    listen(context.database.url, on_notify, context.stop, on_connected=on_connected)
