"""How instants are written for people and machines: ISO 8601 in UTC with a `Z`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


@overload
def iso_utc(value: datetime) -> str: ...
@overload
def iso_utc(value: None) -> None: ...
@overload
def iso_utc(value: datetime | None) -> str | None: ...


def iso_utc(value: datetime | None) -> str | None:
    """`2026-11-30T09:00:00.123456Z` for an aware instant; None stays None."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
