"""The run-request and cancel annotations: their names and how a value is written.

DESIGN.md §2: each new value of `achilles.io/run-requested-at` on an Agent is one
manual run request. The writer (CLI, inbox wake, portal) and the reader (the
operator) share this contract; how a value is read is pure, in domain/agent_event.py.
No API client is involved here.
"""

from __future__ import annotations

from datetime import UTC, datetime

from achilles.domain.timestamps import iso_utc
from achilles.k8s.resources.common import API_GROUP

RUN_REQUESTED_AT = f"{API_GROUP}/run-requested-at"
# Cancel a run of this Agent (issue 22): the value is the run's id; each new value is one
# request, and cancelling a run that ended already changes nothing.
CANCEL_RUN = f"{API_GROUP}/cancel-run"


def format_run_request(at: datetime) -> str:
    """Microsecond precision in UTC, e.g. `2026-11-30T09:00:00.123456Z`, so that two
    requests in the same second are two values (two requests)."""
    if at.tzinfo is None:
        raise ValueError("a run request time must be timezone-aware")
    return iso_utc(at.astimezone(UTC))
