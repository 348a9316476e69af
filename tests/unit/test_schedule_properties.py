"""Properties of slot arithmetic that must hold for any schedule, zone and instant.

Random instants rarely land on a DST day, so half the examples are drawn next to a real
transition of the zone (found by scanning the zone's offsets), with the wall time drawn
around the transition's local time: that is where gaps and overlaps are.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import event, given, settings
from hypothesis import strategies as st

from achilles.domain.schedule import (
    CalendarSchedule,
    collapse_missed_slots,
    next_slot_after,
    parse_schedule,
    slots_after,
)

# Zones with half- and quarter-hour offsets, 30-minute DST, negative DST, a midnight
# transition, southern-hemisphere DST and no DST. (Zones that skipped a whole date,
# like Pacific/Apia in 2011, break "one slot per local date"; see test_schedule_slots.)
ZONES = [
    "UTC",
    "Europe/Berlin",
    "Europe/Dublin",
    "America/New_York",
    "America/St_Johns",
    "America/Santiago",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Australia/Adelaide",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
]
SCAN_YEARS = range(2024, 2029)
SLOTS_PER_EXAMPLE = 12
PROPERTY_SETTINGS = settings(max_examples=300, deadline=None)


@cache
def transitions(zone: str) -> tuple[datetime, ...]:
    """UTC instants where the zone's offset changes, within SCAN_YEARS."""
    tz = ZoneInfo(zone)
    step = timedelta(hours=6)  # transitions are months apart; bisect within a step
    found: list[datetime] = []
    moment = datetime(SCAN_YEARS.start, 1, 1, tzinfo=UTC)
    end = datetime(SCAN_YEARS.stop, 1, 1, tzinfo=UTC)
    while moment < end:
        later = moment + step
        if moment.astimezone(tz).utcoffset() != later.astimezone(tz).utcoffset():
            low, high = moment, later
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(tz).utcoffset() == low.astimezone(tz).utcoffset():
                    low = middle
                else:
                    high = middle
            found.append(high.replace(microsecond=0))
        moment = later
    return tuple(found)


def wall_time_exists(wall: datetime, tz: ZoneInfo) -> bool:
    return wall.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall


def _offset(instant: datetime, tz: ZoneInfo) -> timedelta:
    offset = instant.astimezone(tz).utcoffset()
    assert offset is not None
    return offset


def local_wall(instant: datetime, tz: ZoneInfo) -> datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


@st.composite
def calendar_cases(draw: st.DrawFn) -> tuple[CalendarSchedule, ZoneInfo, datetime]:
    zone = draw(st.sampled_from(ZONES))
    tz = ZoneInfo(zone)
    cadence = draw(st.sampled_from(["daily", "weekly"]))
    where = draw(st.sampled_from(["in the change", "near the change", "anywhere"]))
    if transitions(zone) and where != "anywhere":
        transition = draw(st.sampled_from(transitions(zone)))
        # The wall clock just after the change: a spring gap ends there, an autumn
        # overlap starts there, and either is as long as the change of offset.
        local_then = local_wall(transition, tz)
        change = _offset(transition, tz) - _offset(transition - timedelta(seconds=1), tz)
        minutes = abs(change) // timedelta(minutes=1)
        if where == "in the change":
            start = local_then - change if change > timedelta(0) else local_then
            wall = start + timedelta(minutes=draw(st.integers(0, minutes - 1)))
        else:
            wall = local_then + timedelta(minutes=draw(st.integers(-minutes - 30, minutes + 30)))
        # An overlap's first occurrence comes before the change: start early enough.
        earliest = timedelta(hours=2) if where == "in the change" else timedelta(hours=-1)
        after = transition - earliest - timedelta(seconds=draw(st.integers(0, 3 * 86400)))
        weekday = draw(st.sampled_from([local_then.weekday(), draw(st.integers(0, 6))]))
    else:
        wall = datetime(2000, 1, 1, draw(st.integers(0, 23)), draw(st.integers(0, 59)))
        after = draw(
            st.datetimes(datetime(1990, 1, 1), datetime(2045, 12, 31), timezones=st.just(UTC))
        )
        weekday = draw(st.integers(0, 6))
    data: dict[str, Any] = {"type": "calendar", "cadence": cadence, "time": f"{wall:%H:%M}"}
    if cadence == "weekly":
        data["weekday"] = weekday
    schedule = parse_schedule(data)
    assert isinstance(schedule, CalendarSchedule)
    return schedule, tz, after


@st.composite
def any_cases(draw: st.DrawFn) -> tuple[Any, ZoneInfo, datetime, datetime | None]:
    if draw(st.booleans()):
        calendar, tz, after = draw(calendar_cases())
        return calendar, tz, after, None
    tz = ZoneInfo(draw(st.sampled_from(ZONES)))
    schedule = parse_schedule({"type": "interval", "every_hours": draw(st.integers(1, 720))})
    after = draw(st.datetimes(datetime(1990, 1, 1), datetime(2045, 12, 31), timezones=st.just(UTC)))
    anchor = after - timedelta(seconds=draw(st.integers(-86400, 10**8)))
    return schedule, tz, after, draw(st.one_of(st.none(), st.just(anchor)))


@PROPERTY_SETTINGS
@given(any_cases())
def test_slots_strictly_increase_and_follow_after(
    case: tuple[Any, ZoneInfo, datetime, Any],
) -> None:
    schedule, tz, after, anchor = case
    slots = slots_after(schedule, after, tz, SLOTS_PER_EXAMPLE, anchor)
    assert slots[0] > after
    assert all(earlier < later for earlier, later in itertools.pairwise(slots))
    assert all(slot.tzinfo is UTC for slot in slots)


@PROPERTY_SETTINGS
@given(any_cases(), st.data())
def test_no_slot_is_skipped_between_consecutive_slots(
    case: tuple[Any, ZoneInfo, datetime, Any], data: st.DataObject
) -> None:
    """From any instant in [slot_k, slot_k+1) the next slot is slot_k+1: none skipped or extra."""
    schedule, tz, after, anchor = case
    slots = slots_after(schedule, after, tz, 4, anchor)
    anchor = after if anchor is None else anchor  # what slots_after anchored on
    for earlier, later in itertools.pairwise(slots):
        gap = (later - earlier) // timedelta(microseconds=1)
        inside = earlier + timedelta(microseconds=data.draw(st.integers(0, gap - 1)))
        assert next_slot_after(schedule, inside, tz, anchor) == later
        assert next_slot_after(schedule, later - timedelta(microseconds=1), tz, anchor) == later


@PROPERTY_SETTINGS
@given(calendar_cases())
def test_calendar_slots_are_the_wall_time_or_the_end_of_its_gap(
    case: tuple[CalendarSchedule, ZoneInfo, datetime],
) -> None:
    schedule, tz, after = case
    for slot in slots_after(schedule, after, tz, SLOTS_PER_EXAMPLE):
        local = slot.astimezone(tz)
        wanted = datetime.combine(local.date(), schedule.wall_time)
        if local.replace(tzinfo=None) == wanted:
            assert local.fold == 0  # a repeated wall time runs at its first occurrence
            if local_wall(slot + timedelta(hours=3), tz) - local.replace(tzinfo=None) < timedelta(
                hours=3
            ):
                event("wall time repeated later (overlap)")
        else:
            # Shifted only because the wall time does not exist that day; it runs at the
            # first instant after it: the clock read earlier just before the slot.
            event("wall time in a gap")
            assert not wall_time_exists(wanted, tz)
            assert local_wall(slot - timedelta(seconds=1), tz) < wanted < local.replace(tzinfo=None)
        if schedule.cadence == "weekly":
            assert local.weekday() == schedule.weekday


@PROPERTY_SETTINGS
@given(calendar_cases())
def test_calendar_slots_take_one_slot_per_due_local_date(
    case: tuple[CalendarSchedule, ZoneInfo, datetime],
) -> None:
    schedule, tz, after = case
    dates = [
        slot.astimezone(tz).date() for slot in slots_after(schedule, after, tz, SLOTS_PER_EXAMPLE)
    ]
    step = timedelta(days=1 if schedule.cadence == "daily" else 7)
    assert all(later - earlier == step for earlier, later in itertools.pairwise(dates))


@PROPERTY_SETTINGS
@given(any_cases())
def test_interval_slots_are_whole_periods_from_the_anchor(
    case: tuple[Any, ZoneInfo, datetime, Any],
) -> None:
    schedule, tz, after, anchor = case
    if schedule.type != "interval":
        return
    period = timedelta(hours=schedule.every_hours)
    base = after if anchor is None else anchor
    slots = slots_after(schedule, after, tz, SLOTS_PER_EXAMPLE, anchor)
    assert slots[0] - max(after, base) <= period
    assert all((slot - base) % period == timedelta(0) and slot > base for slot in slots)
    assert all(later - earlier == period for earlier, later in itertools.pairwise(slots))


@PROPERTY_SETTINGS
@given(any_cases(), st.integers(0, 60 * 86400))
def test_missed_slots_collapse_into_one_due_run(
    case: tuple[Any, ZoneInfo, datetime, Any], downtime_seconds: int
) -> None:
    schedule, tz, after, anchor = case
    stored = next_slot_after(schedule, after, tz, anchor)
    now = stored + timedelta(seconds=downtime_seconds)
    advance = collapse_missed_slots(schedule, stored, now, tz, anchor)
    assert advance.is_due
    assert advance.next_run_at > now
    assert advance.next_run_at == next_slot_after(schedule, now, tz, anchor)
    # Nothing is due again until the new slot comes: one run for the whole downtime.
    assert not collapse_missed_slots(schedule, advance.next_run_at, now, tz, anchor).is_due


@PROPERTY_SETTINGS
@given(any_cases(), st.integers(1, 30 * 86400))
def test_a_future_slot_is_left_alone(case: tuple[Any, ZoneInfo, datetime, Any], ahead: int) -> None:
    schedule, tz, after, anchor = case
    stored = after + timedelta(seconds=ahead)
    assert collapse_missed_slots(schedule, stored, after, tz, anchor) == (False, stored)


def test_transition_scan_finds_known_changes() -> None:
    """Guard for the generator: it really draws next to DST changes."""
    assert datetime(2026, 3, 29, 1, tzinfo=UTC) in transitions("Europe/Berlin")
    assert datetime(2026, 10, 3, 15, 30, tzinfo=UTC) in transitions("Australia/Lord_Howe")
    assert transitions("Asia/Kolkata") == ()
