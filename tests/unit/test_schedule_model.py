"""The schedule union: what is valid in either spelling, and what the errors say."""

from __future__ import annotations

from datetime import time
from typing import Any

import pytest

from achilles.domain.schedule import (
    MAX_EVERY_HOURS,
    SCHEDULE_ADAPTER,
    CalendarSchedule,
    IntervalSchedule,
    parse_schedule,
    schedule_to_cr,
    schedule_to_db,
)
from achilles.errors import InvalidInputError, InvalidScheduleError

VALID: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    # (input, database form, CR form)
    (
        {"type": "interval", "every_hours": 6},
        {"type": "interval", "every_hours": 6},
        {"type": "interval", "everyHours": 6},
    ),
    (
        {"type": "interval", "everyHours": 1},
        {"type": "interval", "every_hours": 1},
        {"type": "interval", "everyHours": 1},
    ),
    (
        {"type": "interval", "every_hours": MAX_EVERY_HOURS},
        {"type": "interval", "every_hours": 720},
        {"type": "interval", "everyHours": 720},
    ),
    (
        {"type": "calendar", "cadence": "daily", "time": "00:00"},
        {"type": "calendar", "cadence": "daily", "time": "00:00"},
        {"type": "calendar", "cadence": "daily", "time": "00:00"},
    ),
    (
        {"type": "calendar", "cadence": "daily", "weekday": None, "time": "23:59"},
        {"type": "calendar", "cadence": "daily", "time": "23:59"},
        {"type": "calendar", "cadence": "daily", "time": "23:59"},
    ),
    (
        # Seed 000: the weekday "matters only for weekly": a daily one is dropped.
        {"type": "calendar", "cadence": "daily", "weekday": 2, "time": "09:00"},
        {"type": "calendar", "cadence": "daily", "time": "09:00"},
        {"type": "calendar", "cadence": "daily", "time": "09:00"},
    ),
    (
        {"type": "calendar", "cadence": "weekly", "weekday": 0, "time": "09:00"},
        {"type": "calendar", "cadence": "weekly", "weekday": 0, "time": "09:00"},
        {"type": "calendar", "cadence": "weekly", "weekday": 0, "time": "09:00"},
    ),
    (
        {"type": "calendar", "cadence": "weekly", "weekday": 6, "time": "19:45"},
        {"type": "calendar", "cadence": "weekly", "weekday": 6, "time": "19:45"},
        {"type": "calendar", "cadence": "weekly", "weekday": 6, "time": "19:45"},
    ),
]


@pytest.mark.parametrize(("data", "db_form", "cr_form"), VALID)
def test_valid_schedules_round_trip_in_both_spellings(
    data: dict[str, Any], db_form: dict[str, Any], cr_form: dict[str, Any]
) -> None:
    schedule = parse_schedule(data)
    assert schedule_to_db(schedule) == db_form
    assert schedule_to_cr(schedule) == cr_form
    assert parse_schedule(db_form) == schedule
    assert parse_schedule(cr_form) == schedule


def test_discriminator_picks_the_model() -> None:
    assert isinstance(parse_schedule({"type": "interval", "every_hours": 2}), IntervalSchedule)
    calendar = parse_schedule({"type": "calendar", "cadence": "daily", "time": "07:05"})
    assert isinstance(calendar, CalendarSchedule)
    assert calendar.wall_time == time(7, 5)


def test_models_are_frozen() -> None:
    schedule = IntervalSchedule(type="interval", every_hours=2)
    with pytest.raises(ValueError, match="frozen"):
        schedule.every_hours = 3  # type: ignore[misc]


INVALID: list[tuple[object, str]] = [
    # (input, the exact one-line message)
    (
        {"type": "cron", "every_hours": 1},
        "schedule.type: must be one of 'interval', 'calendar' (got 'cron')",
    ),
    ({"every_hours": 1}, "schedule.type: required"),
    (None, "schedule: must be an object (got null)"),
    ([1, 2], "schedule: must be an object (got [1, 2])"),
    ("daily", "schedule: must be an object (got 'daily')"),
    (
        {"type": "interval", "every_hours": 0},
        "schedule.every_hours: must be greater than or equal to 1 (got 0)",
    ),
    (
        {"type": "interval", "everyHours": 0},
        "schedule.everyHours: must be greater than or equal to 1 (got 0)",
    ),
    (
        {"type": "interval", "every_hours": 721},
        "schedule.every_hours: must be less than or equal to 720 (got 721)",
    ),
    (
        {"type": "interval", "every_hours": "6"},
        "schedule.every_hours: must be a valid integer (got '6')",
    ),
    (
        {"type": "interval", "every_hours": 6.0},
        "schedule.every_hours: must be a valid integer (got 6.0)",
    ),
    (
        {"type": "interval", "every_hours": True},
        "schedule.every_hours: must be a valid integer (got true)",
    ),
    ({"type": "interval"}, "schedule: every_hours is required (everyHours in an Agent CR)"),
    (
        {"type": "interval", "every_hours": 6, "everyHours": 6},
        "schedule: every_hours and everyHours are the same field; give one",
    ),
    ({"type": "interval", "every_hours": 6, "hours": 2}, "schedule.hours: unknown field"),
    (
        {"type": "calendar", "cadence": "daily", "time": "24:00"},
        "schedule.time: must be HH:MM within 00:00-23:59 (got '24:00')",
    ),
    (
        {"type": "calendar", "cadence": "daily", "time": "9:00"},
        "schedule.time: must be HH:MM within 00:00-23:59 (got '9:00')",
    ),
    (
        {"type": "calendar", "cadence": "daily", "time": "09:60"},
        "schedule.time: must be HH:MM within 00:00-23:59 (got '09:60')",
    ),
    (
        {"type": "calendar", "cadence": "daily", "time": "09:00:00"},
        "schedule.time: must be HH:MM within 00:00-23:59 (got '09:00:00')",
    ),
    (
        {"type": "calendar", "cadence": "daily", "time": 900},
        "schedule.time: must be HH:MM within 00:00-23:59 (got 900)",
    ),
    (
        {"type": "calendar", "cadence": "weekly", "time": "09:00"},
        "schedule.weekday: required for a weekly schedule (0=Monday .. 6=Sunday)",
    ),
    (
        {"type": "calendar", "cadence": "weekly", "weekday": None, "time": "09:00"},
        "schedule.weekday: required for a weekly schedule (0=Monday .. 6=Sunday)",
    ),
    (
        {"type": "calendar", "cadence": "weekly", "weekday": 7, "time": "09:00"},
        "schedule.weekday: must be less than or equal to 6 (got 7)",
    ),
    (
        {"type": "calendar", "cadence": "weekly", "weekday": -1, "time": "09:00"},
        "schedule.weekday: must be greater than or equal to 0 (got -1)",
    ),
    (
        {"type": "calendar", "cadence": "monthly", "time": "09:00"},
        "schedule.cadence: must be 'daily' or 'weekly' (got 'monthly')",
    ),
    (
        {"type": "calendar", "cadence": "daily"},
        "schedule.time: required",
    ),
    (
        {"type": "calendar", "cadence": "weekly", "weekday": 9, "time": "25:00", "tz": "UTC"},
        "schedule.weekday: must be less than or equal to 6 (got 9); "
        "schedule.time: must be HH:MM within 00:00-23:59 (got '25:00'); "
        "schedule.tz: unknown field",
    ),
]


@pytest.mark.parametrize(("data", "message"), INVALID)
def test_invalid_schedules_name_the_field(data: object, message: str) -> None:
    with pytest.raises(InvalidScheduleError) as caught:
        parse_schedule(data)
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, InvalidInputError)


def test_error_path_uses_the_callers_field_name() -> None:
    with pytest.raises(InvalidScheduleError, match=r"^spec\.schedule\.everyHours: "):
        parse_schedule({"type": "interval", "everyHours": 0}, field="spec.schedule")


def test_json_schema_keeps_constraints_declarative() -> None:
    """The CRD generator reads these: bounds, pattern, discriminator, no extra fields."""
    schema = SCHEDULE_ADAPTER.json_schema(by_alias=True)
    interval = schema["$defs"]["IntervalSchedule"]
    calendar = schema["$defs"]["CalendarSchedule"]
    assert schema["discriminator"]["propertyName"] == "type"
    assert interval["properties"]["everyHours"]["minimum"] == 1
    assert interval["properties"]["everyHours"]["maximum"] == MAX_EVERY_HOURS
    assert interval["required"] == ["type", "everyHours"]
    assert calendar["properties"]["time"]["pattern"] == r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
    assert calendar["required"] == ["type", "cadence", "time"]
    assert interval["additionalProperties"] is False
    assert calendar["additionalProperties"] is False
