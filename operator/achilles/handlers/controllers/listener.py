"""The listener: the journal's NOTIFYs wake the other loops at once.

A run inserted or changing state (payload: its agent id) wakes the dispatcher, marks
the agent's status and wakes the sweeper's budget-warnings pass (a run that ends may
cross a threshold; the payload cannot tell an end from a start, and the pass is one
transaction at the sweeper's next tick however many runs changed since); a
`next_run_at` changing wakes the scheduler; a notification written to the outbox wakes
the notifier; an owner deactivated wakes the sweeper's owners pass. The loops tick on
their own too, so a lost connection delays work, never loses it.
"""

from __future__ import annotations

from achilles.db.notifications import (
    OUTBOX_CHANNEL,
    OWNERS_CHANNEL,
    RUNS_CHANNEL,
    SCHEDULE_CHANNEL,
    listen,
)
from achilles.handlers.context import RuntimeContext


def run(context: RuntimeContext) -> None:
    def on_notify(channel: str, payload: str) -> None:
        if channel == RUNS_CHANNEL:
            context.dispatch_wake.set()
            context.budget_warnings_wake.set()
            if payload.isdigit():
                context.mark_dirty([int(payload)])
        elif channel == SCHEDULE_CHANNEL:
            context.schedule_wake.set()
        elif channel == OUTBOX_CHANNEL:
            context.notify_wake.set()
        elif channel == OWNERS_CHANNEL:
            context.owners_wake.set()

    def on_connected() -> None:
        # Connected again after an outage: what was missed meanwhile is looked at now.
        context.schedule_wake.set()
        context.dispatch_wake.set()
        context.notify_wake.set()
        context.owners_wake.set()
        context.budget_warnings_wake.set()

    listen(context.database.url, on_notify, context.stop, on_connected=on_connected)
