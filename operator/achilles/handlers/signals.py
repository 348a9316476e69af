"""What the operator's parts tell each other: the signals a part emits when something
happened (`context.wakes.emit`), which wake the controllers that declared them as a
source (handlers/manager.py's table). The emitter says what happened, never whom it
wakes."""

from __future__ import annotations

from enum import StrEnum

from achilles.db.notifications import (
    OUTBOX_CHANNEL,
    OWNERS_CHANNEL,
    RUNS_CHANNEL,
    SCHEDULE_CHANNEL,
)


class Happened(StrEnum):
    # The journal's NOTIFYs, as the listener hears them.
    RUNS_CHANGED = RUNS_CHANNEL  # a run inserted or changing state
    SLOTS_MOVED = SCHEDULE_CHANNEL  # an agent's next_run_at moved
    NOTIFICATION_WRITTEN = OUTBOX_CHANNEL  # a notification in the outbox
    OWNER_DEACTIVATED = OWNERS_CHANNEL  # an owner's `active` went true -> false
    # The listener connected again: what was NOTIFYed meanwhile is lost, look now.
    RECONNECTED = "listener-reconnected"
    # The process's own: a run queued (a slot, a manual request, a reply's wake) or
    # requeued (its Job vanished before it started), or a slot freed (a cancel).
    DISPATCHABLE = "runs-to-dispatch"
    # The AgentPlatform changed: the organisation's zone may move slots, the cap grow.
    PLATFORM_CHANGED = "platform-changed"
    # Agents' journal fields moved (`context.mark_dirty`): their statuses follow.
    STATUS_MOVED = "status-moved"


# Who emits each signal (a module of handlers/, controllers/ for a loop's): the other
# half of who wakes whom, beside the `On` sources of handlers/manager.py's table.
# tests/unit/test_manager_table.py reads the modules' `wakes.emit` calls against it.
EMITTED_BY: dict[Happened, tuple[str, ...]] = {
    Happened.RUNS_CHANGED: ("listener",),
    Happened.SLOTS_MOVED: ("listener",),
    Happened.NOTIFICATION_WRITTEN: ("listener",),
    Happened.OWNER_DEACTIVATED: ("listener",),
    Happened.RECONNECTED: ("listener",),
    # A manual run queued or a cancel's freed slot; a slot's runs; a run requeued by
    # the reaper or queued for a reply; a run's pod gone (its agent's next run waited).
    Happened.DISPATCHABLE: ("agents", "scheduler", "sweeper", "watchers"),
    Happened.PLATFORM_CHANGED: ("catalogue",),
    # Through `context.mark_dirty` (or `want_reconcile`): every part that moves an
    # Agent's journal fields.
    Happened.STATUS_MOVED: ("agents", "dispatcher", "events", "listener", "scheduler", "sweeper"),
}
