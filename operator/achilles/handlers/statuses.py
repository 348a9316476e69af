"""What the status writer keeps between passes: which Agents to write next, and what it
wrote last for each (so an unchanged status costs no API call).

Operator runtime state, in memory only: a restarted operator starts empty, records every
Agent's status at its listing (writing it where it differs), and carries on from there.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any


class WrittenStatuses:
    """What the status writer last patched for each agent, so that it patches only the
    agents whose journal fields changed.

    A run changing state marks its owner's every agent (they share the weekly budget), so
    without this each run meant a patch per agent of its owner and per state (57 patches a
    second at 2 runs a second with ten agents per owner, `achilles bench steady-state`),
    and every patch came back to the operator as a watch event. Thread-safe: the writer
    and the handlers (which write the whole status) both record here.
    """

    def __init__(self) -> None:
        # A digest per agent, not the fields: one entry per Agent for the process's life
        # (about 100 bytes against 1 KB of dicts and strings, some of them kopf's bodies').
        self._written: dict[int, bytes] = {}
        self._lock = threading.Lock()

    def changed(self, agent_id: int, fields: dict[str, Any]) -> bool:
        digest = _digest(fields)
        with self._lock:
            return self._written.get(agent_id) != digest

    def record(self, agent_id: int, fields: dict[str, Any]) -> None:
        digest = _digest(fields)
        with self._lock:
            self._written[agent_id] = digest

    def forget(self, agent_id: int) -> None:
        with self._lock:
            self._written.pop(agent_id, None)


def _digest(fields: dict[str, Any]) -> bytes:
    """The journal fields as written: a merge patch drops null fields, so a status read
    back from the object (a listed Agent left as it is) and one built from the journal
    digest alike."""
    written = {
        key: {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value
        for key, value in fields.items()
        if value is not None
    }
    payload = json.dumps(written, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(payload.encode(), digest_size=16).digest()


class StatusQueue:
    """Which Agents' statuses the status writer rewrites next, and which Agent events
    must be reconciled in full although their spec did not change. Thread-safe: the
    handlers, the listener and the loops mark; the status writer takes.

    An owner's agents share the weekly budget, so one run's tokens change the status of
    every agent of its owner. The agent whose run moved is written at once; the owner's
    other agents in turns, every `sibling_every` seconds at most `sibling_batch` of
    them, longest waiting first, each once however often its budget moved meanwhile. An
    owner with 1,000 agents turned every run's end into 1,000 patches and as many watch
    events per replica (`achilles chaos double-leader`); an owner with a few agents sees
    the budget on all of them within one turn.
    """

    def __init__(
        self,
        sibling_every: float,
        sibling_batch: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sibling_every = sibling_every
        self.sibling_batch = sibling_batch
        self._clock = clock
        self._lock = threading.Lock()
        self._now: set[int] = set()
        self._siblings: dict[int, None] = {}  # insertion-ordered: longest waiting first
        self._siblings_taken_at = float("-inf")
        self._reconcile: set[int] = set()

    def mark(self, agent_ids: Iterable[int]) -> None:
        """These agents' own journal fields moved: write them at the next pass."""
        with self._lock:
            self._now.update(agent_ids)

    def mark_siblings(self, agent_ids: Iterable[int]) -> None:
        """These agents share a budget that moved: write them in a coming turn."""
        with self._lock:
            for agent_id in agent_ids:
                self._siblings.setdefault(agent_id, None)

    def take(self) -> tuple[set[int], set[int]]:
        """(agents to write now, siblings whose turn came): both leave the queue."""
        with self._lock:
            now, self._now = self._now, set()
            siblings: set[int] = set()
            if self._siblings and self._clock() - self._siblings_taken_at >= self.sibling_every:
                for agent_id in list(self._siblings)[: self.sibling_batch]:
                    del self._siblings[agent_id]
                    siblings.add(agent_id)
                self._siblings_taken_at = self._clock()
            return now, siblings

    def put_back(self, now: set[int], siblings: set[int]) -> None:
        """A pass failed: what it took is written at the next one."""
        with self._lock:
            self._now |= now
            for agent_id in siblings:
                self._siblings.setdefault(agent_id, None)

    def want_reconcile(self, agent_ids: Iterable[int]) -> None:
        """Reconcile these agents at their next event (their owner's zone moved)."""
        with self._lock:
            self._reconcile.update(agent_ids)

    def take_reconcile(self, agent_id: int) -> bool:
        with self._lock:
            wanted = agent_id in self._reconcile
            self._reconcile.discard(agent_id)
            return wanted
