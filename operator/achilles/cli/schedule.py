"""`achilles schedule`: preview when a schedule runs, with the engine's own slot rules.

The preview calls the same functions the scheduler uses (`achilles.domain.schedule`),
so what it shows for a DST day is what the engine will do.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING

import click

from achilles.cli.common import WholeNumber, echo_json, echo_table, reports_errors
from achilles.domain.timestamps import iso_utc

if TYPE_CHECKING:
    from achilles.domain.schedule import Schedule

MAX_PREVIEW_COUNT = 1000


@click.group()
def schedule() -> None:
    """Agent schedules: validate one and preview its next slots."""


@schedule.command(name="next")
@click.option(
    "--schedule",
    "schedule_json",
    required=True,
    metavar="JSON",
    help='Schedule JSON, database or CR spelling, e.g. \'{"type":"interval","every_hours":6}\' '
    'or \'{"type":"calendar","cadence":"weekly","weekday":0,"time":"09:00"}\'.',
)
@click.option(
    "--timezone",
    "timezone_name",
    default="UTC",
    show_default=True,
    help="IANA zone calendar times are read in (the owner's, else the organisation's).",
)
@click.option(
    "--after",
    metavar="ISO8601",
    help="List slots strictly after this instant [default: now]. A value without an "
    "offset is a wall time in --timezone (the earlier instant if it occurs twice).",
)
@click.option(
    "--anchor",
    metavar="ISO8601",
    help="Interval schedules: when the schedule was set; slots are anchor + k*N hours "
    "[default: --after]. Read like --after.",
)
@click.option(
    "--count",
    type=WholeNumber(1, MAX_PREVIEW_COUNT),
    default=5,
    show_default=True,
    help="How many slots to list.",
)
@click.option("--json", "as_json", is_flag=True, help='Print [{"utc": ..., "local": ...}, ...].')
@reports_errors
def next_slots(
    schedule_json: str,
    timezone_name: str,
    after: str | None,
    anchor: str | None,
    count: int,
    as_json: bool,
) -> None:
    """Print the next COUNT slots of a schedule, in local time and UTC."""
    from achilles.domain.schedule import load_timezone, parse_schedule, slots_after

    parsed = parse_schedule(_load_json(schedule_json))
    tz = load_timezone(timezone_name, field="--timezone")
    start = (
        _parse_instant(after, tz, "--after") if after else datetime.now(UTC).replace(microsecond=0)
    )
    anchor_at = _parse_instant(anchor, tz, "--anchor") if anchor else None
    try:
        slots = slots_after(parsed, start, tz, count, anchor_at)
    except OverflowError as exc:
        raise click.UsageError(
            f"--after: {count} slots after {start.isoformat()} fall outside years 1-9999"
        ) from exc
    if as_json:
        echo_json(
            [{"utc": iso_utc(slot), "local": slot.astimezone(tz).isoformat()} for slot in slots]
        )
    else:
        echo_table(
            ["#", "local", "utc", "note"],
            [_table_row(index, slot, parsed, tz) for index, slot in enumerate(slots, start=1)],
        )


def _load_json(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.UsageError(f"--schedule: invalid JSON: {exc}") from exc


def _parse_instant(text: str, tz: tzinfo, option: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise click.UsageError(
            f"{option}: not an ISO 8601 date-time (got {text!r}; e.g. 2026-03-29T01:00:00Z)"
        ) from exc
    return value.replace(tzinfo=tz) if value.tzinfo is None else value


def _table_row(index: int, slot: datetime, parsed: Schedule, tz: tzinfo) -> list[str]:
    from achilles.domain.schedule import CalendarSchedule

    local = slot.astimezone(tz)
    note = ""
    if isinstance(parsed, CalendarSchedule) and local.strftime("%H:%M") != parsed.time:
        note = f"{parsed.time} does not exist that day (clocks go forward)"
    return [str(index), f"{local.isoformat()} {local:%a}", iso_utc(slot) or "", note]
