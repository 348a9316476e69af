"""LISTEN for the journal's NOTIFYs: a run inserted or changing state (payload: its
agent id) and a `next_run_at` changing (migration 0005), a notification written to the
outbox (0014), an owner deactivated (0015). Wakes the operator's loops at once; they
still tick on their own, so a lost connection delays, never loses, work."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
from sqlalchemy.engine import URL

RUNS_CHANNEL = "achilles_runs"
SCHEDULE_CHANNEL = "achilles_schedule"
# A row inserted into the notification outbox (0014).
OUTBOX_CHANNEL = "achilles_notifications"
# A user's `active` going from true to false (0015).
OWNERS_CHANNEL = "achilles_owners"
CHANNELS = (RUNS_CHANNEL, SCHEDULE_CHANNEL, OUTBOX_CHANNEL, OWNERS_CHANNEL)


def libpq_dsn(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def listen_once(
    url: URL,
    on_notify: Callable[[str, str], None],
    stop: threading.Event,
    *,
    on_connected: Callable[[], None] = lambda: None,
) -> None:
    """One connection: call `on_notify(channel, payload)` for every notification until
    `stop` is set. A lost connection raises (psycopg.Error): its caller connects again
    (the operator's listener, after the runtime's backoff)."""
    with psycopg.connect(libpq_dsn(url), autocommit=True, connect_timeout=10) as conn:
        for channel in CHANNELS:
            conn.execute(f"LISTEN {channel}")
        on_connected()
        while not stop.is_set():
            for note in conn.notifies(timeout=1.0):
                on_notify(note.channel, note.payload)
