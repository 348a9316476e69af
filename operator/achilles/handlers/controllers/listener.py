"""The listener: the journal's NOTIFYs, emitted as what happened (handlers/signals.py) for
the loops that declared them as a source (handlers/manager.py's table says who wakes).

A run inserted or changing state (payload: its agent id) also marks the agent's status
(`mark_dirty`); a `next_run_at` changing, a notification written to the outbox and an
owner deactivated are each a signal of their own. Connected again after an outage, it
emits `RECONNECTED`: the NOTIFYs sent meanwhile are lost, so what they would have woken
looks now. The loops tick on their own too, so a lost connection delays work, never
loses it.
"""

from __future__ import annotations

from achilles.db.notifications import RUNS_CHANNEL, listen
from achilles.handlers.context import RuntimeContext
from achilles.handlers.signals import Happened

NAME = "listener"
# The channels it LISTENs on, each emitted as the signal of the same name.
CHANNELS = (
    Happened.RUNS_CHANGED,
    Happened.SLOTS_MOVED,
    Happened.NOTIFICATION_WRITTEN,
    Happened.OWNER_DEACTIVATED,
)


def run(context: RuntimeContext) -> None:
    def on_notify(channel: str, payload: str) -> None:
        if channel in CHANNELS:
            context.wakes.emit(Happened(channel))
        if channel == RUNS_CHANNEL and payload.isdigit():
            context.mark_dirty([int(payload)])

    def on_connected() -> None:
        context.wakes.emit(Happened.RECONNECTED)

    listen(context.database.url, on_notify, context.stop, on_connected=on_connected)
