"""The scheduler's queries: due agents, agents whose next slot must be (re)computed.

An agent has a `next_run_at` only while every durable lock is open and it has a
schedule (DESIGN.md §4); `schedule_zone` records the zone the slot was computed in,
so a changed owner or organisation zone is found here, not only on an Agent event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    Update,
    and_,
    bindparam,
    func,
    select,
    update,
)
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, PlatformSettings, User
from achilles.domain.schedule import load_timezone, next_slot_after, parse_schedule
from achilles.errors import UnknownTimezoneError


@dataclass(frozen=True)
class ScheduledAgent:
    agent_id: int
    schedule: dict[str, Any]
    next_run_at: datetime | None
    zone: str
    schedule_zone: str | None
    # Auto-suspend's inputs (0013_run_controls): the agent's own threshold (None: the
    # platform's) and its last edit (runs before it do not count).
    suspend_after_failures: int | None = None
    updated_at: datetime | None = None


def _startable() -> ColumnElement[bool]:
    """Open durable locks (auto-suspend closes the owner's: no lock of its own)."""
    return and_(
        Agent.enabled.is_(True),
        Agent.admin_paused.is_(False),
        Agent.model_id.is_not(None),
        User.active.is_(True),
    )


def _effective_zone() -> ColumnElement[str]:
    return func.coalesce(User.timezone, PlatformSettings.timezone)


# What `scheduled_of` reads besides the agent's id, schedule and slot, for a query that
# joins the owner (`User`) and the platform settings (`PlatformSettings`, id 1).
SCHEDULING_COLUMNS = (
    _effective_zone().label("zone"),
    _startable().label("startable"),
    Agent.schedule_zone,
    Agent.suspend_after_failures,
    Agent.updated_at,
)


def _select_scheduled() -> Select[Any]:
    return (
        select(
            Agent.id,
            Agent.schedule,
            Agent.next_run_at,
            _effective_zone().label("zone"),
            Agent.schedule_zone,
            Agent.suspend_after_failures,
            Agent.updated_at,
        )
        .join(User, User.id == Agent.user_id)
        .join(PlatformSettings, PlatformSettings.id == 1)
    )


def _rows(rows: Any) -> list[ScheduledAgent]:
    return [
        ScheduledAgent(
            agent_id=row.id,
            schedule=row.schedule,
            next_run_at=row.next_run_at,
            zone=row.zone,
            schedule_zone=row.schedule_zone,
            suspend_after_failures=row.suspend_after_failures,
            updated_at=row.updated_at,
        )
        for row in rows
    ]


def take_due_agents(session: Session, now: datetime, batch: int) -> list[ScheduledAgent]:
    """Due agents, locked for this transaction; another replica skips them."""
    return _rows(
        session.execute(
            _select_scheduled()
            .where(Agent.next_run_at <= now, _startable(), Agent.schedule.is_not(None))
            .order_by(Agent.next_run_at)
            .limit(batch)
            .with_for_update(of=Agent, skip_locked=True)
        ).all()
    )


def take_agents_to_reschedule(session: Session, batch: int) -> list[ScheduledAgent]:
    """Startable scheduled agents without a slot, or with one computed in another zone."""
    return _rows(
        session.execute(
            _select_scheduled()
            .where(
                _startable(),
                Agent.schedule.is_not(None),
                (Agent.next_run_at.is_(None))
                | (Agent.schedule_zone.is_distinct_from(_effective_zone())),
            )
            .limit(batch)
            .with_for_update(of=Agent, skip_locked=True)
        ).all()
    )


def schedule_of(session: Session, agent_id: int) -> ScheduledAgent | None:
    """The agent's schedule inputs when it may be scheduled (startable, has a schedule)."""
    found = _rows(
        session.execute(
            _select_scheduled().where(
                Agent.id == agent_id, _startable(), Agent.schedule.is_not(None)
            )
        ).all()
    )
    return found[0] if found else None


def clear_closed_schedules(session: Session) -> int:
    """No slot for an agent that cannot start or has no schedule (locks closed)."""
    blocked = (
        select(Agent.id)
        .join(User, User.id == Agent.user_id)
        .where(Agent.next_run_at.is_not(None), ~_startable())
    )
    result = session.execute(
        update(Agent)
        .where(
            Agent.next_run_at.is_not(None),
            Agent.id.in_(blocked) | Agent.schedule.is_(None),
        )
        .values(next_run_at=None, schedule_zone=None)
        .returning(Agent.id)
    )
    return len(result.all())


def _set_next_run_statement() -> Update:
    agents = cast(Table, Agent.__table__)
    # Only a real change is written: an unchanged slot must not wake every scheduler
    # (the NOTIFY trigger fires on any UPDATE OF next_run_at) nor touch `updated_at`.
    return (
        update(agents)
        .where(
            agents.c.id == bindparam("agent"),
            agents.c.next_run_at.is_distinct_from(bindparam("slot"))
            | agents.c.schedule_zone.is_distinct_from(bindparam("zone")),
        )
        .values(next_run_at=bindparam("slot"), schedule_zone=bindparam("zone"))
    )


# Built once and run on the session's connection (no statement built, no ORM execution
# per call): a reconcile that moves the slot writes it.
_SET_NEXT_RUN = _set_next_run_statement()


def set_next_run(
    session: Session, agent_id: int, next_run_at: datetime | None, zone: str | None
) -> None:
    zone = zone if next_run_at else None
    session.connection().execute(
        _SET_NEXT_RUN, {"agent": agent_id, "slot": next_run_at, "zone": zone}
    )


def set_next_runs(
    session: Session, slots: Mapping[int, tuple[datetime | None, str | None]]
) -> None:
    """`set_next_run` for many agents in one statement (one round trip: the scheduler's
    batch), each written only if it changes; `slots` maps an agent to (slot, zone)."""
    if not slots:
        return
    session.connection().execute(
        _SET_NEXT_RUN,
        [
            {"agent": agent_id, "slot": slot, "zone": zone if slot else None}
            for agent_id, (slot, zone) in slots.items()
        ],
    )


def nearest_next_run(session: Session) -> datetime | None:
    value: datetime | None = session.execute(
        select(func.min(Agent.next_run_at)).where(Agent.next_run_at.is_not(None))
    ).scalar_one()
    return value


def refresh_next_run(session: Session, agent_id: int, now: datetime, *, reset: bool) -> bool:
    """Give a startable scheduled agent its next slot; no slot for any other. True when
    the agent has a slot afterwards (`settle_next_run`, its schedule read here)."""
    scheduled = schedule_of(session, agent_id)
    return settle_next_run(session, agent_id, scheduled, now, reset=reset)[0] is not None


def scheduled_of(row: Any) -> ScheduledAgent | None:
    """A row that selected SCHEDULING_COLUMNS (and `Agent.id`, `schedule`,
    `next_run_at`), as `schedule_of` would read it: None unless it may be scheduled."""
    if not row.startable or row.schedule is None:
        return None
    return _rows([row])[0]


def settle_next_run(
    session: Session,
    agent_id: int,
    scheduled: ScheduledAgent | None,
    now: datetime,
    *,
    reset: bool,
    current: tuple[datetime | None, str | None] | None = None,
) -> tuple[datetime | None, str | None]:
    """`refresh_next_run` for an agent whose schedule was read already (`scheduled`:
    None when it may not be scheduled); the (slot, zone) it has afterwards. `current`:
    the row's (next_run_at, schedule_zone) when the caller read them with the row
    locked, so that a slot that would not change costs no statement.

    `reset` (the schedule itself changed) starts over from now; otherwise a slot
    computed in the current zone stays, and an interval keeps its grid (anchor = the
    previous `next_run_at`). An owner's zone that is no zone (`users` is the platform's
    table) gives no slot, rather than failing the reconcile or the scheduler's pass.
    """

    def write(slot: datetime | None, zone: str | None) -> tuple[datetime | None, str | None]:
        zone = zone if slot else None
        if current is None or current != (slot, zone):
            set_next_run(session, agent_id, slot, zone)
        return slot, zone

    if scheduled is None:
        return write(None, None)
    if (
        not reset
        and scheduled.next_run_at is not None
        and scheduled.schedule_zone == scheduled.zone
    ):
        return scheduled.next_run_at, scheduled.schedule_zone
    schedule = parse_schedule(scheduled.schedule)
    try:
        tz = load_timezone(scheduled.zone)
    except UnknownTimezoneError:
        return write(None, None)
    anchor = None if reset else scheduled.next_run_at
    if anchor is not None and anchor > now and schedule.type == "interval":
        next_run_at = anchor  # the grid's next slot is still ahead
    else:
        next_run_at = next_slot_after(schedule, now, tz, anchor)
    return write(next_run_at, scheduled.zone)
