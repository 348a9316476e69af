"""The listener: the journal's NOTIFYs, emitted as what happened (handlers/signals.py) for
the loops that declared them as a source (handlers/manager.py's table says who wakes).

A run inserted or changing state (payload: its agent id) also marks the agent's status
(`mark_dirty`); a `next_run_at` changing, a notification written to the outbox and an
owner deactivated are each a signal of their own. Connected again after an outage, it
emits `RECONNECTED`: the NOTIFYs sent meanwhile are lost, so what they would have woken
looks now. The loops tick on their own too, so a lost connection delays work, never
loses it; the connection is made again after the runtime's backoff.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from achilles.db.database import Database
from achilles.db.notifications import RUNS_CHANNEL, listen_once
from achilles.handlers.context import StatusMarks
from achilles.handlers.signals import Happened
from achilles.runtime.backoff import Backoff
from achilles.runtime.manager import LoopHandle

NAME = "listener"
# A lost connection tried again after 1 s, then 2 s while the database stays away (the
# manager's table): the NOTIFYs sent meanwhile are lost, each loop's tick covers them.
RETRY = Backoff(1.0, 2.0)
# The channels it LISTENs on, each emitted as the signal of the same name.
CHANNELS = (
    Happened.RUNS_CHANGED,
    Happened.SLOTS_MOVED,
    Happened.NOTIFICATION_WRITTEN,
    Happened.OWNER_DEACTIVATED,
)


@dataclass(frozen=True)
class Listener:
    """The listener's handles (handlers/manager.py builds them): the journal's database
    (its URL: it holds a LISTEN connection of its own, outside the pool), `emit` for
    what it hears, and the status marks (a run's NOTIFY moves its Agent's status)."""

    database: Database
    emit: Callable[[Happened], None]
    marks: StatusMarks

    def on_notify(self, channel: str, payload: str) -> None:
        if channel in CHANNELS:
            self.emit(Happened(channel))
        if channel == RUNS_CHANNEL and payload.isdigit():
            self.marks.mark_dirty([int(payload)])

    def on_connected(self) -> None:
        self.emit(Happened.RECONNECTED)


def run(listener: Listener, loop: LoopHandle) -> None:
    """A connection LISTENing until the stop; a lost one is a failed pass, logged as
    one warning line (the database away is expected: handlers/context.py's
    `operator_passes`) and connected again after the runtime's backoff
    (`LoopHandle.drive`)."""

    def session() -> float:
        url = listener.database.url
        listen_once(url, listener.on_notify, loop.stop, on_connected=listener.on_connected)
        return 0.0

    loop.drive(session)
