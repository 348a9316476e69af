"""The run-request and cancel annotations: their names, how a value is written, how one
is read.

DESIGN.md §2: each new value of `achilles.io/run-requested-at` on an Agent is one
manual run request. The writer (CLI, inbox wake, portal) and the reader (the
operator) share this contract; no API client is involved here.
"""

from __future__ import annotations

from datetime import UTC, datetime

from achilles.domain.timestamps import iso_utc
from achilles.k8s.resources.common import API_GROUP

RUN_REQUESTED_AT = f"{API_GROUP}/run-requested-at"
# Cancel a run of this Agent (issue 22): the value is the run's id; each new value is one
# request, and cancelling a run that ended already changes nothing.
CANCEL_RUN = f"{API_GROUP}/cancel-run"
# A request value is short (an RFC 3339 time); anything longer is not ours to honour.
MAX_REQUEST_VALUE_LENGTH = 64


def format_run_request(at: datetime) -> str:
    """Microsecond precision in UTC, e.g. `2026-11-30T09:00:00.123456Z`, so that two
    requests in the same second are two values (two requests)."""
    if at.tzinfo is None:
        raise ValueError("a run request time must be timezone-aware")
    return iso_utc(at.astimezone(UTC))


def parse_cancel_request(value: str | None) -> str | None:
    """The cancel request a value carries (compared with the last one handled), or None."""
    return parse_run_request(value)


def cancel_run_id(request: str) -> int | None:
    """The run a cancel request names: a decimal run id, else None (not a request we can
    honour; the operator says so once)."""
    return int(request) if request.isdigit() and len(request) <= 18 else None


def parse_run_request(value: str | None) -> str | None:
    """The request a value carries, or None when there is none or it is not one.

    Any non-empty value up to `MAX_REQUEST_VALUE_LENGTH` is a request (a portal may
    write its own request ids); the value itself is the request's identity.
    """
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > MAX_REQUEST_VALUE_LENGTH:
        return None
    return value
