"""Agent schedules: the validated model and the slot arithmetic behind `next_run_at`.

A schedule is a discriminated union on `type` (seed 000; absent = manual runs only):
- `{"type": "interval", "every_hours": N}` (CR spelling `everyHours`), 1 <= N <= 720;
- `{"type": "calendar", "cadence": "daily"|"weekly", "weekday": 0-6, "time": "HH:MM"}`,
  weekday (0=Monday) required for weekly; on daily it is ignored (dropped).

Rules the engine relies on (docs/schedule.md says the same for people):
- Calendar slots are wall times in the owner's zone (`users.timezone`, else the
  organisation's). A wall time that does not exist that day (spring forward) runs at the
  first valid instant after it, the transition: 02:30 on a 02:00->03:00 day runs at
  03:00. A wall time that exists twice (fall back) runs once, at its first occurrence.
- Interval anchoring: slots are `anchor + k * N hours` for whole k >= 1, where the
  anchor is the instant the schedule was set (the engine stores it), counted in absolute
  UTC hours, so a DST change neither stretches nor shrinks a period and restarts or
  downtime never shift the grid. Without an anchor, "now" is the anchor.
- After downtime, missed slots collapse into one run, and the next slot is the first
  one strictly after now (`collapse_missed_slots`).
"""

from achilles.domain.schedule.model import (
    MAX_EVERY_HOURS,
    MIN_EVERY_HOURS,
    SCHEDULE_ADAPTER,
    WALL_TIME_PATTERN,
    CalendarSchedule,
    IntervalSchedule,
    Schedule,
    parse_schedule,
    schedule_to_cr,
    schedule_to_db,
)
from achilles.domain.schedule.slots import (
    SlotAdvance,
    collapse_missed_slots,
    next_slot_after,
    slots_after,
)
from achilles.domain.timezones import load_timezone, resolve_timezone, resolve_wall_time

__all__ = [
    "MAX_EVERY_HOURS",
    "MIN_EVERY_HOURS",
    "SCHEDULE_ADAPTER",
    "WALL_TIME_PATTERN",
    "CalendarSchedule",
    "IntervalSchedule",
    "Schedule",
    "SlotAdvance",
    "collapse_missed_slots",
    "load_timezone",
    "next_slot_after",
    "parse_schedule",
    "resolve_timezone",
    "resolve_wall_time",
    "schedule_to_cr",
    "schedule_to_db",
    "slots_after",
]
