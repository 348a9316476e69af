"""Start gates (DESIGN.md §4), pure.

Durable locks are standing settings of the agent: when one is closed the agent
is not startable at all, leaves no journal row, and has no `next_run_at`.
Runtime gates (budget, already running) are only visible at start time and so
are recorded as `skipped` rows; the already-running gate is the database's
partial unique index, not a check here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class LockReason(StrEnum):
    """Why an agent cannot start; also the status condition reasons on the CR."""

    DISABLED = "disabled"
    ADMIN_PAUSED = "admin_paused"
    NO_MODEL = "no_model"
    OWNER_MISSING = "owner_missing"
    OWNER_INACTIVE = "owner_inactive"


@dataclass(frozen=True)
class DurableLocks:
    enabled: bool
    admin_paused: bool
    has_model: bool
    owner_present: bool
    owner_active: bool


def closed_locks(locks: DurableLocks) -> tuple[LockReason, ...]:
    """Every closed durable lock, in a stable order (empty = startable)."""
    closed: list[LockReason] = []
    if not locks.enabled:
        closed.append(LockReason.DISABLED)
    if locks.admin_paused:
        closed.append(LockReason.ADMIN_PAUSED)
    if not locks.has_model:
        closed.append(LockReason.NO_MODEL)
    if not locks.owner_present:
        closed.append(LockReason.OWNER_MISSING)
    elif not locks.owner_active:
        closed.append(LockReason.OWNER_INACTIVE)
    return tuple(closed)


def is_startable(locks: DurableLocks) -> bool:
    return not closed_locks(locks)


def is_budget_exhausted(used_this_week: int, weekly_limit: int) -> bool:
    """The weekly budget gate: no new run once the owner's usage reaches the limit."""
    return used_this_week >= weekly_limit
