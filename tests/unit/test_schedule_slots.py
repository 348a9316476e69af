"""Next-slot arithmetic on DST days, odd offsets, intervals and after downtime.

Every expected instant is worked out by hand from the zone's rules (written next to
each case), not computed by the code under test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from achilles.domain.schedule import (
    SlotAdvance,
    collapse_missed_slots,
    load_timezone,
    next_slot_after,
    parse_schedule,
    resolve_timezone,
    slots_after,
)
from achilles.errors import InvalidInputError, UnknownTimezoneError


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def daily(at: str) -> Any:
    return parse_schedule({"type": "calendar", "cadence": "daily", "time": at})


def weekly(weekday: int, at: str) -> Any:
    return parse_schedule({"type": "calendar", "cadence": "weekly", "weekday": weekday, "time": at})


def every(hours: int) -> Any:
    return parse_schedule({"type": "interval", "every_hours": hours})


CALENDAR_CASES = [
    # zone, time, after, expected slots (local, with the offset in force)
    pytest.param(
        # 2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not exist, runs at 03:00 CEST.
        "Europe/Berlin",
        "02:30",
        "2026-03-27T12:00:00Z",
        ["2026-03-28T02:30+01:00", "2026-03-29T03:00+02:00", "2026-03-30T02:30+02:00"],
        id="berlin-spring-gap",
    ),
    pytest.param(
        # The first minute of the gap and the first after it land on the same instant.
        "Europe/Berlin",
        "02:00",
        "2026-03-29T00:00:00+01:00",
        ["2026-03-29T03:00+02:00", "2026-03-30T02:00+02:00"],
        id="berlin-spring-gap-start",
    ),
    pytest.param(
        "Europe/Berlin",
        "01:59",
        "2026-03-29T00:00:00+01:00",
        ["2026-03-29T01:59+01:00", "2026-03-30T01:59+02:00"],
        id="berlin-spring-just-before-gap",
    ),
    pytest.param(
        # 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice, runs at the first only.
        "Europe/Berlin",
        "02:30",
        "2026-10-24T12:00:00Z",
        ["2026-10-25T02:30+02:00", "2026-10-26T02:30+01:00"],
        id="berlin-autumn-overlap",
    ),
    pytest.param(
        # 03:00 is after the repeated hour: unambiguous, in CET.
        "Europe/Berlin",
        "03:00",
        "2026-10-24T12:00:00Z",
        ["2026-10-25T03:00+01:00", "2026-10-26T03:00+01:00"],
        id="berlin-autumn-after-overlap",
    ),
    pytest.param(
        # 2026-03-08 02:00 EST -> 03:00 EDT.
        "America/New_York",
        "02:30",
        "2026-03-07T12:00:00Z",
        ["2026-03-08T03:00-04:00", "2026-03-09T02:30-04:00"],
        id="new-york-spring-gap",
    ),
    pytest.param(
        # 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 twice, first (EDT) only.
        "America/New_York",
        "01:30",
        "2026-10-31T12:00:00Z",
        ["2026-11-01T01:30-04:00", "2026-11-02T01:30-05:00"],
        id="new-york-autumn-overlap",
    ),
    pytest.param(
        "Asia/Kolkata",
        "09:00",
        "2026-03-28T00:00:00Z",
        ["2026-03-28T09:00+05:30", "2026-03-29T09:00+05:30"],
        id="kolkata-half-hour",
    ),
    pytest.param(
        # 00:10 local is still the previous day in UTC (18:25Z).
        "Asia/Kathmandu",
        "00:10",
        "2026-03-28T00:00:00Z",
        ["2026-03-29T00:10+05:45", "2026-03-30T00:10+05:45"],
        id="kathmandu-45-minutes",
    ),
    pytest.param(
        # Lord Howe moves by 30 minutes: 2026-10-04 02:00 +10:30 -> 02:30 +11:00.
        "Australia/Lord_Howe",
        "02:15",
        "2026-10-02T00:00:00Z",
        ["2026-10-03T02:15+10:30", "2026-10-04T02:30+11:00", "2026-10-05T02:15+11:00"],
        id="lord-howe-spring-30-minute-gap",
    ),
    pytest.param(
        # 2026-04-05 02:00 +11:00 -> 01:30 +10:30: 01:45 twice, first only.
        "Australia/Lord_Howe",
        "01:45",
        "2026-04-03T00:00:00Z",
        ["2026-04-04T01:45+11:00", "2026-04-05T01:45+11:00", "2026-04-06T01:45+10:30"],
        id="lord-howe-autumn-30-minute-overlap",
    ),
    pytest.param(
        # Chatham: 2026-09-27 02:45 +12:45 -> 03:45 +13:45.
        "Pacific/Chatham",
        "03:00",
        "2026-09-25T00:00:00Z",
        ["2026-09-26T03:00+12:45", "2026-09-27T03:45+13:45", "2026-09-28T03:00+13:45"],
        id="chatham-spring-gap",
    ),
    pytest.param(
        # 2026-04-05 03:45 +13:45 -> 02:45 +12:45: 03:00 twice, first only.
        "Pacific/Chatham",
        "03:00",
        "2026-04-03T00:00:00Z",
        ["2026-04-04T03:00+13:45", "2026-04-05T03:00+13:45", "2026-04-06T03:00+12:45"],
        id="chatham-autumn-overlap",
    ),
    pytest.param(
        # Irish time uses negative DST in the tz database; only the offsets matter.
        # 2026-03-29 01:00 GMT -> 02:00 IST.
        "Europe/Dublin",
        "01:30",
        "2026-03-28T12:00:00Z",
        ["2026-03-29T02:00+01:00", "2026-03-30T01:30+01:00"],
        id="dublin-negative-dst-gap",
    ),
    pytest.param(
        # Chile springs forward at midnight: 2026-09-06 00:00 -04:00 -> 01:00 -03:00.
        "America/Santiago",
        "00:30",
        "2026-09-04T12:00:00Z",
        ["2026-09-05T00:30-04:00", "2026-09-06T01:00-03:00", "2026-09-07T00:30-03:00"],
        id="santiago-midnight-gap",
    ),
    pytest.param(
        # Samoa skipped 2011-12-30 entirely (-10:00 -> +14:00 at the end of the 29th):
        # that day's 09:00 runs at the first instant after it, 2011-12-31 00:00.
        "Pacific/Apia",
        "09:00",
        "2011-12-29T00:00:00Z",
        ["2011-12-29T09:00-10:00", "2011-12-31T00:00+14:00", "2011-12-31T09:00+14:00"],
        id="apia-skipped-day",
    ),
]


@pytest.mark.parametrize(("zone", "at", "after", "expected"), CALENDAR_CASES)
def test_daily_slots_on_dst_days(zone: str, at: str, after: str, expected: list[str]) -> None:
    tz = load_timezone(zone)
    slots = slots_after(daily(at), utc(after), tz, len(expected))
    assert slots == [utc(text) for text in expected]
    # The offset in force is the one written in the case (the local rendering agrees).
    assert [slot.astimezone(tz).isoformat(timespec="minutes") for slot in slots] == expected
    assert all(slot.tzinfo is UTC for slot in slots)


def test_ambiguous_time_runs_once_even_from_inside_the_overlap() -> None:
    tz = load_timezone("Europe/Berlin")
    first = utc("2026-10-25T02:30+02:00")
    between = utc("2026-10-25T02:45+02:00")  # after the first 02:30, before the second
    assert next_slot_after(daily("02:30"), first, tz) == utc("2026-10-26T02:30+01:00")
    assert next_slot_after(daily("02:30"), between, tz) == utc("2026-10-26T02:30+01:00")


def test_slot_is_strictly_after() -> None:
    tz = load_timezone("Asia/Kolkata")
    slot = utc("2026-03-28T09:00+05:30")
    assert next_slot_after(daily("09:00"), slot - timedelta(microseconds=1), tz) == slot
    assert next_slot_after(daily("09:00"), slot, tz) == slot + timedelta(days=1)


@pytest.mark.parametrize(
    ("zone", "weekday", "at", "after", "expected"),
    [
        pytest.param(
            "Europe/Berlin",
            6,
            "02:30",
            "2026-03-20T00:00:00Z",
            ["2026-03-22T02:30+01:00", "2026-03-29T03:00+02:00", "2026-04-05T02:30+02:00"],
            id="berlin-sunday-through-the-gap",
        ),
        pytest.param(
            "America/New_York",
            0,
            "09:00",
            "2026-02-28T00:00:00Z",
            ["2026-03-02T09:00-05:00", "2026-03-09T09:00-04:00", "2026-03-16T09:00-04:00"],
            id="new-york-monday-across-spring",
        ),
        pytest.param(
            "America/New_York",
            6,
            "01:30",
            "2026-10-24T12:00:00Z",
            ["2026-10-25T01:30-04:00", "2026-11-01T01:30-04:00", "2026-11-08T01:30-05:00"],
            id="new-york-sunday-through-the-overlap",
        ),
        pytest.param(
            # Monday 00:10 in Kathmandu is Sunday 18:25 UTC.
            "Asia/Kathmandu",
            0,
            "00:10",
            "2026-03-28T00:00:00Z",
            ["2026-03-30T00:10+05:45", "2026-04-06T00:10+05:45"],
            id="kathmandu-monday-is-sunday-in-utc",
        ),
    ],
)
def test_weekly_slots(zone: str, weekday: int, at: str, after: str, expected: list[str]) -> None:
    tz = load_timezone(zone)
    slots = slots_after(weekly(weekday, at), utc(after), tz, len(expected))
    assert [slot.astimezone(tz).isoformat(timespec="minutes") for slot in slots] == expected
    assert {slot.astimezone(tz).weekday() for slot in slots} == {weekday}


def test_kathmandu_monday_slot_falls_on_sunday_utc() -> None:
    slot = next_slot_after(
        weekly(0, "00:10"), utc("2026-03-28T00:00Z"), load_timezone("Asia/Kathmandu")
    )
    assert slot == datetime(2026, 3, 29, 18, 25, tzinfo=UTC)


def test_interval_stays_absolute_hours_across_spring_forward() -> None:
    tz = load_timezone("Europe/Berlin")
    anchor = utc("2026-03-28T12:00+01:00")
    slots = slots_after(every(24), anchor, tz, 2, anchor=anchor)
    assert slots == [utc("2026-03-29T11:00Z"), utc("2026-03-30T11:00Z")]
    # 24 real hours, so the wall clock moves from 12:00 to 13:00 across the change.
    assert slots[0].astimezone(tz).isoformat() == "2026-03-29T13:00:00+02:00"


def test_interval_runs_through_the_repeated_hour_once_per_real_hour() -> None:
    tz = load_timezone("America/New_York")
    anchor = utc("2026-11-01T04:00Z")  # 00:00 EDT
    slots = slots_after(every(1), anchor, tz, 3, anchor=anchor)
    assert [slot.astimezone(tz).isoformat() for slot in slots] == [
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T02:00:00-05:00",
    ]


def test_interval_anchor_given_in_a_local_zone_is_not_wall_clock_arithmetic() -> None:
    tz = load_timezone("Europe/Berlin")
    anchor = datetime(2026, 3, 28, 23, 0, tzinfo=tz)  # 22:00Z, six hours before 04:00Z
    assert next_slot_after(every(6), anchor, tz, anchor) == utc("2026-03-29T04:00Z")


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ("2026-01-01T00:00Z", "2026-01-01T06:00Z"),  # at the anchor: k >= 1
        ("2026-01-01T05:59:59Z", "2026-01-01T06:00Z"),
        ("2026-01-01T06:00Z", "2026-01-01T12:00Z"),  # strictly after
        ("2026-01-03T13:00Z", "2026-01-03T18:00Z"),  # the grid holds over days
        ("2025-12-31T00:00Z", "2026-01-01T06:00Z"),  # anchor still ahead: first slot anchor+N
    ],
)
def test_interval_slots_sit_on_the_anchor_grid(after: str, expected: str) -> None:
    anchor = utc("2026-01-01T00:00Z")
    assert next_slot_after(every(6), utc(after), load_timezone("UTC"), anchor) == utc(expected)


def test_interval_without_anchor_counts_from_after() -> None:
    after = utc("2026-05-05T10:17:03Z")
    slots = slots_after(every(5), after, load_timezone("Asia/Kolkata"), 3)
    assert slots == [after + timedelta(hours=5 * k) for k in (1, 2, 3)]


def test_downtime_collapses_missed_calendar_slots_into_one_run() -> None:
    tz = load_timezone("Europe/Berlin")
    missed_since = utc("2026-03-01T09:00+01:00")
    now = utc("2026-03-05T10:00+01:00")  # four more 09:00 slots passed meanwhile
    advance = collapse_missed_slots(daily("09:00"), missed_since, now, tz)
    assert advance == SlotAdvance(is_due=True, next_run_at=utc("2026-03-06T09:00+01:00"))
    assert advance.next_run_at > now


def test_downtime_collapses_missed_interval_slots_and_keeps_the_grid() -> None:
    anchor = utc("2026-01-01T00:00Z")
    now = utc("2026-01-03T07:30Z")
    advance = collapse_missed_slots(
        every(6), utc("2026-01-01T06:00Z"), now, load_timezone("UTC"), anchor
    )
    assert advance == SlotAdvance(is_due=True, next_run_at=utc("2026-01-03T12:00Z"))


def test_slot_at_exactly_now_is_due() -> None:
    tz = load_timezone("UTC")
    now = utc("2026-03-05T09:00Z")
    assert collapse_missed_slots(daily("09:00"), now, now, tz) == SlotAdvance(
        True, utc("2026-03-06T09:00Z")
    )


def test_future_slot_is_not_due_and_unchanged() -> None:
    tz = load_timezone("UTC")
    upcoming = utc("2026-03-06T09:00Z")
    advance = collapse_missed_slots(daily("09:00"), upcoming, utc("2026-03-05T10:00Z"), tz)
    assert advance == SlotAdvance(is_due=False, next_run_at=upcoming)


@pytest.mark.parametrize("naive_arg", ["after", "anchor"])
def test_naive_datetimes_are_refused(naive_arg: str) -> None:
    aware = utc("2026-01-01T00:00Z")
    naive = datetime(2026, 1, 1)
    args = {"after": aware, "anchor": aware} | {naive_arg: naive}
    with pytest.raises(ValueError, match=f"{naive_arg} must be a timezone-aware"):
        next_slot_after(every(2), args["after"], load_timezone("UTC"), args["anchor"])


def test_owner_timezone_wins_over_the_organisations() -> None:
    assert resolve_timezone("Asia/Kathmandu", "Europe/Berlin").key == "Asia/Kathmandu"
    assert resolve_timezone(None, "Europe/Berlin").key == "Europe/Berlin"


@pytest.mark.parametrize(
    ("owner", "org", "message"),
    [
        ("Mars/Olympus", "UTC", "users.timezone: unknown time zone 'Mars/Olympus'"),
        (None, "Europe/Berln", "platform_settings.timezone: unknown time zone 'Europe/Berln'"),
        ("", "UTC", "users.timezone: unknown time zone ''"),
        ("America", "UTC", "users.timezone: unknown time zone 'America'"),
        ("../etc/passwd", "UTC", "users.timezone: unknown time zone '../etc/passwd'"),
        ("utc", "UTC", "users.timezone: unknown time zone 'utc'"),
    ],
)
def test_unknown_timezones_are_named(owner: str | None, org: str, message: str) -> None:
    with pytest.raises(UnknownTimezoneError) as caught:
        resolve_timezone(owner, org)
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, InvalidInputError)
