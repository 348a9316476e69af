"""The start-up intake: an Agent whose row, status and observedGeneration already agree
costs no write and no round trip. The reconcile of an Agent event
(services/agent_events.py) asks it, with the listed Agent's digest
(domain/agent_event.py), through its `SettledRows`.

The agent watch lists every Agent when the operator starts (and after a watch expired)
and hands each over as an event; reconciling each in full is a transaction of a dozen statements
and took 3-6 minutes at 10,000 Agents (`achilles bench intake`). Most of them changed
nothing while no operator ran. `SettledAgents` reads every row once, a page at a time,
and keeps one digest per agent of what a reconcile would write and what the status
would show (its row, its owner, model and tools, its slot, its journal fields); a listed
Agent whose own digest (from its spec and status) is among them is left alone.

Why a snapshot may be older than the event it answers: it only ever says "the CR as
listed and the row as read agreed". Whatever changed either of them after that comes
with its own event or wake (a spec change is a new generation; a run's end marks the
status writer; an owner's deactivation, a model's withdrawal and a zone's change are
followed by their loops), exactly as when the operator had been running all along. A
row that is not settled (a spec write still owed, a slot still to compute, a tool not in
the catalogue) has no digest, so its Agent is reconciled in full.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Any

from achilles.db.database import Database
from achilles.db.journal.agent_links import UNKNOWN_TOOLS_KEY
from achilles.db.journal.intake import IntakeRow, intake_page, intake_tokens
from achilles.db.journal.owed_spec import META_KEY as OWED_KEY
from achilles.db.journal.settings import database_now
from achilles.domain.agent_event import definition_digest, status_view
from achilles.domain.agent_status import AgentStatusRow, agent_status, journal_fields
from achilles.domain.gates import DurableLocks, closed_locks
from achilles.domain.inbox_wake import inbox_settings_from_meta
from achilles.domain.schedule import load_timezone
from achilles.errors import UnknownTimezoneError

log = logging.getLogger("achilles.operator")

PAGE = 1000
# A snapshot older than this is read again before it answers (a later listing: the watch
# lists again when a watch's resourceVersion expired).
SNAPSHOT_SECONDS = 300.0
# Shapes of status seen (locks, schedule, zone): few, whatever the number of agents.
SETTLED_STATUS_CACHE = 10_000
_SETTLED_STATUS: dict[tuple[DurableLocks, Hashable, str], dict[str, Any]] = {}


class SettledAgents:
    """One digest per settled agent row, read on the first question and answered from
    memory; each digest answers once. Thread-safe (the watch's and the workers' threads
    ask at once)."""

    def __init__(
        self,
        database: Database,
        *,
        max_age: float = SNAPSHOT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._database = database
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        # digest -> the row's wake-on-reply setting (a spec that omits it leaves it be)
        self._digests: dict[bytes, bool] | None = None
        self._read_at = float("-inf")

    def unchanged(self, digest: bytes, wake_on_reply: bool | None, *, wait: bool = True) -> bool:
        """Whether reconciling the listed Agent of `digest` (domain/agent_event.py's
        `cr_digest`), saying `wake_on_reply`, would write nothing, neither row nor status.
        `wait=False` (the agent watch's thread): False at once, not a read, when the snapshot is
        being read or due to be read again; the caller then asks again on a thread."""
        if not self._lock.acquire(blocking=wait):
            return False
        try:
            if not wait and not self._fresh():
                return False
            digests = self._current()
            wake = digests.pop(digest, None)
        finally:
            self._lock.release()
        if wake is None:
            return False
        return wake_on_reply is None or wake_on_reply == wake

    def preload(self) -> threading.Thread:
        """Read the snapshot now, in a thread of its own (the operator's start waits for
        it, with a bound, before the agent watch lists the Agents). A failed read is logged; the
        first question reads again."""

        def read() -> None:
            try:
                with self._lock:
                    self._current()
            except Exception:
                log.exception(
                    "the intake snapshot could not be read; the first listed Agent reads it"
                )

        thread = threading.Thread(target=read, name="achilles-intake-snapshot", daemon=True)
        thread.start()
        return thread

    def _fresh(self) -> bool:
        """A snapshot is read and young enough to answer (the lock held)."""
        return self._digests is not None and self._clock() - self._read_at <= self._max_age

    def _current(self) -> dict[bytes, bool]:
        """The snapshot, read when there is none or it is too old (the lock held)."""
        digests = self._digests
        if digests is None or not self._fresh():
            self._digests = digests = read_digests(self._database)
            self._read_at = self._clock()
            # Dropped once the listing is long over, whether or not asked again.
            timer = threading.Timer(self._max_age, self.forget)
            timer.daemon = True
            timer.start()
        return digests

    def forget(self) -> None:
        """Drop the snapshot (the listing is over); a later question reads it again."""
        with self._lock:
            if self._digests is not None and self._clock() - self._read_at >= self._max_age:
                self._digests = None


def read_digests(database: Database) -> dict[bytes, bool]:
    """The digest of every settled agent row, read in pages of PAGE agents."""
    digests: dict[bytes, bool] = {}
    after = 0
    # One transaction: the pages and the owners' tokens agree with each other.
    with database.transaction() as session:
        now = database_now(session)
        used_by_owner = intake_tokens(session)
        while True:
            page = intake_page(session, after, PAGE, used_by_owner)
            for row in page:
                digest = row_digest(row, now)
                if digest is not None:
                    digests[digest] = inbox_settings_from_meta(row.meta).wake_on_reply
            if len(page) < PAGE:
                return digests
            after = page[-1].agent_id


def row_digest(row: IntakeRow, now: datetime) -> bytes | None:
    """What a reconcile of this row's CR would write and show, when the row is settled."""
    if row.meta and OWED_KEY in row.meta:
        return None  # a spec write is owed: the reconcile reads it instead of the CR's
    if row.meta and UNKNOWN_TOOLS_KEY in row.meta:
        # A tool not in the catalogue at its last reconcile (its CR's tools differ from
        # the row's links anyway): reconciled, it links to the ones created since.
        return None
    if not _slot_settled(row):
        return None
    if row.enabled and not row.status.locks.owner_active:
        return None  # the owner's deactivation is still to be written onto the CR
    if row.status.suspended_at is not None:
        return None  # suspended after failures: rare, and its status says so in full
    status = {
        **_settled_status(row.status, row.schedule, now),
        "databaseId": row.agent_id,
        **journal_fields(row.status),
    }
    definition = [
        row.uid,
        row.namespace,
        row.cr_name,
        row.name,
        row.description,
        row.prompt,
        row.schedule,
        row.model_name,
        list(row.tool_names),
        row.enabled,
        row.admin_paused,
        row.owner_key,
        row.max_run_tokens,
        row.suspend_after_failures,
    ]
    return definition_digest(definition, status_view(status))


def _settled_status(
    row: AgentStatusRow, schedule: dict[str, Any] | None, now: datetime
) -> dict[str, Any]:
    """The part of `agent_status` that follows only the locks, the schedule and the zone
    (phase, conditions, summary): computed once for the many agents that share them."""
    key = (row.locks, _schedule_key(schedule), row.zone)
    found = _SETTLED_STATUS.get(key)
    if found is None:
        full = agent_status(
            row,
            owner_missing=False,
            unknown_tools=(),
            schedule=schedule,
            previous=None,
            generation=None,
            now=now,
        )
        found = {k: full[k] for k in ("phase", "conditions", "scheduleSummary")}
        if len(_SETTLED_STATUS) >= SETTLED_STATUS_CACHE:
            _SETTLED_STATUS.clear()
        _SETTLED_STATUS[key] = found
    return found


def _schedule_key(schedule: dict[str, Any] | None) -> Hashable:
    if schedule is None:
        return None
    try:
        return tuple(sorted(schedule.items()))  # a schedule is flat: names to numbers/text
    except TypeError:
        return json.dumps(schedule, sort_keys=True)


def _slot_settled(row: IntakeRow) -> bool:
    """Whether `refresh_next_run` would leave the slot as it is."""
    status = row.status
    if closed_locks(status.locks) or row.schedule is None:
        return row.next_run_at is None
    try:
        load_timezone(status.zone)
    except UnknownTimezoneError:
        return row.next_run_at is None
    return row.next_run_at is not None and row.schedule_zone == status.zone
