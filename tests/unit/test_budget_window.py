"""The weekly budget window: Sunday 00:00 in the organisation's zone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from achilles.domain.budget import week_window
from achilles.domain.gates import DurableLocks, LockReason, closed_locks, is_budget_exhausted


@pytest.mark.parametrize(
    ("zone", "now", "start", "end"),
    [
        # Tokyo: Sunday 00:00 local is Saturday 15:00 UTC.
        ("Asia/Tokyo", "2026-11-28T15:00:00", "2026-11-28T15:00:00", "2026-12-05T15:00:00"),
        ("Asia/Tokyo", "2026-11-28T14:59:59", "2026-11-21T15:00:00", "2026-11-28T15:00:00"),
        ("UTC", "2026-11-29T00:00:00", "2026-11-29T00:00:00", "2026-12-06T00:00:00"),
        # New York across the autumn change: the week is 169 hours long.
        (
            "America/New_York",
            "2026-11-03T12:00:00",
            "2026-11-01T04:00:00",
            "2026-11-08T05:00:00",
        ),
        # Santiago springs forward at Sunday 00:00 (2026-09-06): the week starts at 01:00 local.
        (
            "America/Santiago",
            "2026-09-07T12:00:00",
            "2026-09-06T04:00:00",
            "2026-09-13T03:00:00",
        ),
    ],
)
def test_week_window(zone: str, now: str, start: str, end: str) -> None:
    window = week_window(datetime.fromisoformat(now).replace(tzinfo=UTC), ZoneInfo(zone))
    assert window.start == datetime.fromisoformat(start).replace(tzinfo=UTC)
    assert window.end == datetime.fromisoformat(end).replace(tzinfo=UTC)


ZONES = [
    "UTC",
    "Asia/Tokyo",
    "America/New_York",
    "America/Santiago",
    "Asia/Kathmandu",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Europe/Berlin",
]


@settings(max_examples=300, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    now=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2035, 1, 1)),
)
def test_window_contains_now_and_starts_on_local_sunday(zone: str, now: datetime) -> None:
    tz = ZoneInfo(zone)
    instant = now.replace(tzinfo=UTC)
    window = week_window(instant, tz)
    assert window.start <= instant < window.end
    assert window.start.astimezone(tz).weekday() == 6
    assert timedelta(days=7) - timedelta(hours=2) <= window.end - window.start
    assert window.end - window.start <= timedelta(days=7) + timedelta(hours=2)
    # Consecutive weeks tile time with no gap or overlap.
    assert week_window(window.end, tz).start == window.end


@pytest.mark.parametrize(
    ("locks", "reasons"),
    [
        (DurableLocks(True, False, True, True, True), ()),
        (DurableLocks(False, False, True, True, True), (LockReason.DISABLED,)),
        (DurableLocks(True, True, True, True, True), (LockReason.ADMIN_PAUSED,)),
        (DurableLocks(True, False, False, True, True), (LockReason.NO_MODEL,)),
        (DurableLocks(True, False, True, False, False), (LockReason.OWNER_MISSING,)),
        (DurableLocks(True, False, True, True, False), (LockReason.OWNER_INACTIVE,)),
        (
            DurableLocks(False, True, False, True, False),
            (
                LockReason.DISABLED,
                LockReason.ADMIN_PAUSED,
                LockReason.NO_MODEL,
                LockReason.OWNER_INACTIVE,
            ),
        ),
    ],
)
def test_closed_locks(locks: DurableLocks, reasons: tuple[LockReason, ...]) -> None:
    assert closed_locks(locks) == reasons


@pytest.mark.parametrize(
    ("used", "limit", "exhausted"),
    [(0, 0, True), (99, 100, False), (100, 100, True), (150, 100, True)],
)
def test_budget_gate(used: int, limit: int, exhausted: bool) -> None:
    assert is_budget_exhausted(used, limit) is exhausted
