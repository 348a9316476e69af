"""The schedule union: the one definition of what a valid schedule is.

The same model reads the database form (seed 000: `every_hours`) and the Agent CR form
(`everyHours`), and is the source the CRD's OpenAPI schema and CEL rules are generated
from. So constraints stay declarative (`Field(ge=, le=, pattern=)`) wherever pydantic
allows; the only cross-field rule (a weekly schedule names its weekday; a daily one's
weekday is ignored, seed 000: it "matters only for weekly") is one named validator.
"""

from __future__ import annotations

from datetime import time as time_of_day
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from achilles.domain.validation import describe_validation_error
from achilles.errors import InvalidScheduleError

MIN_EVERY_HOURS = 1
# 30 days: a longer period is a calendar job in disguise; becomes the CRD's maximum.
MAX_EVERY_HOURS = 720
# "HH:MM", 00:00-23:59, two digits each: the platform's curation_* format (seed 000).
WALL_TIME_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
WEEKDAY_MONDAY = 0
WEEKDAY_SUNDAY = 6


class IntervalSchedule(BaseModel):
    """Every N hours (absolute hours, counted from the schedule's anchor)."""

    # Spelled out per class (not shared) so the pydantic mypy plugin sees frozen/by-name.
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        # No coercion: "6", 6.0 or true for a number is a mistake to report, not to fix.
        strict=True,
        validate_by_name=True,
        validate_by_alias=True,
    )

    type: Literal["interval"] = Field(
        description="interval: every N hours; calendar: daily or weekly at a wall-clock time"
    )
    every_hours: int = Field(
        alias="everyHours",
        ge=MIN_EVERY_HOURS,
        le=MAX_EVERY_HOURS,
        description="interval: hours between runs (1..720), counted in real hours from "
        "when the schedule was set",
    )

    @model_validator(mode="before")
    @classmethod
    def _every_hours_given_once(cls, data: Any) -> Any:
        # Two spellings of one field: name both when it is missing or given twice, since
        # pydantic alone would report a missing `everyHours` even to a database-form user.
        if isinstance(data, dict):
            spellings = {"every_hours", "everyHours"} & data.keys()
            if not spellings:
                raise PydanticCustomError(
                    "missing", "every_hours is required (everyHours in an Agent CR)"
                )
            if len(spellings) == 2:
                raise PydanticCustomError(
                    "duplicate_field", "every_hours and everyHours are the same field; give one"
                )
        return data


class CalendarSchedule(BaseModel):
    """Daily, or weekly on one weekday, at a wall-clock time in the owner's time zone."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        validate_by_name=True,
        validate_by_alias=True,
    )

    type: Literal["calendar"] = Field(
        description="interval: every N hours; calendar: daily or weekly at a wall-clock time"
    )
    cadence: Literal["daily", "weekly"] = Field(
        description="calendar: every day, or once a week on weekday"
    )
    weekday: int | None = Field(
        default=None,
        ge=WEEKDAY_MONDAY,
        le=WEEKDAY_SUNDAY,
        description="0=Monday .. 6=Sunday; required for weekly, ignored for daily",
        # The default (absent) must still meet the weekly rule below.
        validate_default=True,
    )
    time: str = Field(pattern=WALL_TIME_PATTERN, description="HH:MM, owner's local time")

    @field_validator("weekday", mode="after")
    @classmethod
    def _weekday_only_for_weekly(cls, weekday: int | None, info: ValidationInfo) -> int | None:
        cadence = info.data.get("cadence")  # absent when cadence itself was invalid
        if cadence == "weekly" and weekday is None:
            # Type "missing": reported as a required field (see domain.validation).
            raise PydanticCustomError(
                "missing", "required for a weekly schedule (0=Monday .. 6=Sunday)"
            )
        if cadence == "daily":
            # Seed 000: the weekday "matters only for weekly". A daily schedule that names
            # one (a weekly schedule switched to daily, say) is accepted and the day dropped.
            return None
        return weekday

    @field_validator("time", mode="wrap")
    @classmethod
    def _explain_time_format(cls, value: object, handler: ValidatorFunctionWrapHandler) -> str:
        # The pattern stays declarative (it goes into the CRD); this only words the error.
        try:
            result: str = handler(value)
        except ValidationError as exc:
            raise PydanticCustomError("time_format", "must be HH:MM within 00:00-23:59") from exc
        return result

    @property
    def wall_time(self) -> time_of_day:
        hours, minutes = self.time.split(":")
        return time_of_day(int(hours), int(minutes))


Schedule = Annotated[IntervalSchedule | CalendarSchedule, Field(discriminator="type")]
SCHEDULE_ADAPTER: TypeAdapter[Schedule] = TypeAdapter(Schedule)


def parse_schedule(data: object, *, field: str = "schedule") -> Schedule:
    """Validate a schedule in either spelling; errors name the field under `field`."""
    try:
        return SCHEDULE_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise InvalidScheduleError(describe_validation_error(exc, field, data)) from exc


def schedule_to_db(schedule: Schedule) -> dict[str, Any]:
    """The database (seed 000) form: `{"type": "interval", "every_hours": 6}`."""
    return schedule.model_dump(mode="json", by_alias=False, exclude_none=True)


def schedule_to_cr(schedule: Schedule) -> dict[str, Any]:
    """The Agent CR form: `{"type": "interval", "everyHours": 6}`."""
    return schedule.model_dump(mode="json", by_alias=True, exclude_none=True)
