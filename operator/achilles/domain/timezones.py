"""Time zones: which zone applies, and where a wall time falls in it (calendar slots,
the budget's week, an owner's local time).

A module of its own, not the schedule package's: the budget and the runner's claim need
it without the schedule's pydantic models (`tests/db/test_runner_imports.py`).

Seed 002: a calendar "09:00" resolves against the owner's time zone (`users.timezone`,
else the organisation's from platform settings), and only then lands in `next_run_at`
as UTC. Resolving a wall time is where daylight saving time bites: some wall times do
not exist on a spring-forward day and some exist twice on a fall-back day.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from importlib import resources
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from achilles.errors import UnknownTimezoneError


@functools.cache
def iana_timezones() -> frozenset[str]:
    """Every zone name the engine accepts: the IANA list of the `tzdata` package (pinned by
    the lock file), not whatever the host's tz database holds ("localtime" is no IANA name).
    The CRD's rule and the chart's check are generated from it, so the API server, Helm and
    the engine agree on one list."""
    return frozenset(resources.files("tzdata").joinpath("zones").read_text().split())


def load_timezone(name: str, *, field: str = "timezone") -> ZoneInfo:
    """The IANA zone `name` (e.g. "Europe/Berlin"); a clear error names `field` otherwise."""
    try:
        if name not in iana_timezones():
            raise ZoneInfoNotFoundError(name)
        return ZoneInfo(name)
    # ZoneInfo raises ValueError for malformed keys ("", "/abs", "../x"), OSError for a
    # directory such as "America", ZoneInfoNotFoundError (a KeyError) for unknown names.
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise UnknownTimezoneError(
            f"{field}: unknown time zone {name!r} (expected an IANA name like 'Europe/Berlin')"
        ) from exc


def resolve_timezone(owner_tz: str | None, org_tz: str) -> ZoneInfo:
    """The zone calendar slots resolve in: the owner's if set, else the organisation's."""
    if owner_tz is not None:
        return load_timezone(owner_tz, field="users.timezone")
    return load_timezone(org_tz, field="platform_settings.timezone")


def resolve_wall_time(wall: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant a naive local wall time stands for in `tz`, DST-correct.

    - Ambiguous (the hour repeated when clocks go back): the first occurrence, so a
      daily slot in that hour runs once.
    - Non-existent (skipped when clocks go forward): the first valid instant after it,
      which is the transition itself (02:30 on a 02:00->03:00 day runs at 03:00).
    """
    if wall.tzinfo is not None:
        raise ValueError("resolve_wall_time expects a naive wall-clock time")
    # PEP 495: fold=0 reads the wall time with the offset in force before a transition,
    # fold=1 with the one after. In an overlap fold=0 is the earlier instant; in a gap
    # the offsets swap roles and fold=0 lands *later* than fold=1.
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    if first <= second:
        return first
    return _first_instant_at_or_after(wall, tz, not_yet=second, already=first)


def _first_instant_at_or_after(
    wall: datetime, tz: ZoneInfo, *, not_yet: datetime, already: datetime
) -> datetime:
    """Earliest UTC instant whose local wall time is >= `wall` (the gap's transition).

    Wall time is monotonic between the two gap readings (one forward transition), so a
    bisection over whole seconds finds it; tz database transitions fall on whole seconds.
    """
    low, high = not_yet, already  # local(low) < wall <= local(high)
    while high - low > timedelta(seconds=1):
        middle = low + timedelta(seconds=(high - low).total_seconds() // 2)
        if middle.astimezone(tz).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    return high
