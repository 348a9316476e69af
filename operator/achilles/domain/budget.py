"""The weekly budget window (seed 000): derived, never a counter.

The week starts Sunday 00:00 in the organisation's timezone. Usage is the sum of
`tokens_used` of the owner's runs whose `finished_at` falls in [start, end).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from achilles.domain.timezones import resolve_wall_time

_SUNDAY = 6  # date.weekday(): Monday = 0


@dataclass(frozen=True)
class BudgetWindow:
    start: datetime  # aware, UTC
    end: datetime  # aware, UTC; exclusive


def _local_midnight(day: date, tz: ZoneInfo) -> datetime:
    """00:00 of `day` in tz; where midnight does not exist that day (a DST gap at
    midnight, e.g. America/Santiago) the first valid instant after it."""
    return resolve_wall_time(datetime.combine(day, time(0, 0)), tz)


def week_window(now: datetime, org_tz: ZoneInfo) -> BudgetWindow:
    """The budget week containing `now`: Sunday 00:00 local to the next Sunday 00:00 local."""
    local_today = now.astimezone(org_tz).date()
    days_since_sunday = (local_today.weekday() - _SUNDAY) % 7
    sunday = local_today - timedelta(days=days_since_sunday)
    start = _local_midnight(sunday, org_tz)
    if start > now:  # `now` sits in a midnight gap before the week's first instant
        sunday -= timedelta(days=7)
        start = _local_midnight(sunday, org_tz)
    return BudgetWindow(start=start, end=_local_midnight(sunday + timedelta(days=7), org_tz))
