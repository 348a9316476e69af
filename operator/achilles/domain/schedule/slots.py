"""Next-slot arithmetic: the first slot strictly after a given instant, and collapsing.

Pure functions of (schedule, instants, zone); the scheduler passes its clock's "now", so
tests never wait for real time. All returned instants are aware datetimes in UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

from achilles.domain.schedule.model import CalendarSchedule, IntervalSchedule, Schedule
from achilles.domain.timezones import resolve_wall_time

# A weekly slot is at most 7 local dates away; one date back covers a slot pushed past
# midnight by a gap, and the rest is slack for zones that skipped a whole date (Apia 2011).
_CALENDAR_SEARCH_DAYS = 10


class SlotAdvance(NamedTuple):
    """What the scheduler does with an agent whose `next_run_at` it looked at."""

    is_due: bool  # enqueue exactly one scheduled run now
    next_run_at: datetime  # the value to store back (unchanged when not due)


def next_slot_after(
    schedule: Schedule, after: datetime, tz: ZoneInfo, anchor: datetime | None = None
) -> datetime:
    """The first slot strictly after `after`, in UTC.

    Calendar slots are wall times in `tz` (see `resolve_wall_time` for DST). Interval
    slots are `anchor + k * every_hours` for whole k >= 1, counted in absolute hours; the
    anchor is when the schedule was set, and defaults to `after` ("N hours from now").
    """
    _require_aware(after, "after")
    if isinstance(schedule, IntervalSchedule):
        return _next_interval_slot(schedule, after, after if anchor is None else anchor)
    return _next_calendar_slot(schedule, after, tz)


def slots_after(
    schedule: Schedule,
    after: datetime,
    tz: ZoneInfo,
    count: int,
    anchor: datetime | None = None,
) -> list[datetime]:
    """The next `count` slots after `after`, in order (a preview of `next_slot_after`)."""
    anchor = after if anchor is None else anchor
    slots: list[datetime] = []
    cursor = after
    for _ in range(count):
        cursor = next_slot_after(schedule, cursor, tz, anchor)
        slots.append(cursor)
    return slots


def collapse_missed_slots(
    schedule: Schedule,
    next_run_at: datetime,
    now: datetime,
    tz: ZoneInfo,
    anchor: datetime | None = None,
) -> SlotAdvance:
    """Decide a stored slot against `now`: due once, however many slots were missed.

    DESIGN §4: after downtime the missed slots collapse into at most one run and the
    schedule continues from now, so the new `next_run_at` is the first slot after `now`.
    """
    _require_aware(next_run_at, "next_run_at")
    _require_aware(now, "now")
    if next_run_at > now:
        return SlotAdvance(is_due=False, next_run_at=next_run_at)
    return SlotAdvance(is_due=True, next_run_at=next_slot_after(schedule, now, tz, anchor))


def _next_interval_slot(schedule: IntervalSchedule, after: datetime, anchor: datetime) -> datetime:
    _require_aware(anchor, "anchor")
    # In UTC: aware arithmetic in a ZoneInfo zone is wall-clock arithmetic, which would
    # stretch or shrink a period across a DST change.
    anchor = anchor.astimezone(UTC)
    period = timedelta(hours=schedule.every_hours)
    periods_done = max(0, (after - anchor) // period)
    return anchor + (periods_done + 1) * period


def _next_calendar_slot(schedule: CalendarSchedule, after: datetime, tz: ZoneInfo) -> datetime:
    day = after.astimezone(tz).date() - timedelta(days=1)
    for _ in range(_CALENDAR_SEARCH_DAYS):
        if schedule.cadence == "daily" or day.weekday() == schedule.weekday:
            slot = resolve_wall_time(datetime.combine(day, schedule.wall_time), tz)
            if slot > after:
                return slot
        day += timedelta(days=1)
    raise AssertionError(f"no calendar slot within {_CALENDAR_SEARCH_DAYS} days of {after}")


def _require_aware(value: datetime, name: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime (got {value.isoformat()})")
