"""`achilles run-now --wait` reads a request's fate from the Agent's status."""

from __future__ import annotations

from typing import Any

import pytest

from achilles.services.runs import RequestProgress, progress_of

REQUEST = "2026-12-01T09:00:00.000001Z"


def _status(
    accepted: dict[str, Any] | None = None, last: dict[str, Any] | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {"lastHandledRunRequest": REQUEST, "conditions": []}
    if accepted is not None:
        status["conditions"].append({"type": "RunRequestAccepted", **accepted})
    if last is not None:
        status["lastRun"] = last
    return status


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"lastHandledRunRequest": "older"}, None),
        (_status(), RequestProgress()),
        (
            _status({"status": "False", "message": "run refused: an admin paused the agent"}),
            RequestProgress(refused="run refused: an admin paused the agent"),
        ),
        (
            _status({"status": "True", "message": f"request {REQUEST} answered by run 7"}),
            RequestProgress(run_id=7),
        ),
        (
            _status(
                {"status": "True", "message": f"request {REQUEST} answered by run 7"},
                {"id": 7, "state": "running"},
            ),
            RequestProgress(run_id=7, state="running"),
        ),
        (
            _status(
                {"status": "True", "message": f"request {REQUEST} answered by run 7"},
                {"id": 7, "state": "skipped", "reason": "already_running"},
            ),
            RequestProgress(run_id=7, state="skipped", reason="already_running"),
        ),
        (
            _status(
                {"status": "True", "message": f"request {REQUEST} answered by run 7"},
                {"id": 6, "state": "succeeded"},
            ),
            RequestProgress(run_id=7),
        ),
        (
            # Its queued run was removed when a durable lock closed before it started.
            {
                **_status(
                    {"status": "True", "message": f"request {REQUEST} answered by run 7"},
                    {"id": 6, "state": "succeeded"},
                ),
                "withdrawnRunRequest": {
                    "request": REQUEST,
                    "message": "run refused: an admin paused the agent (spec.adminPaused: true)",
                },
            },
            RequestProgress(
                refused="run refused: an admin paused the agent (spec.adminPaused: true)"
            ),
        ),
        (
            # An earlier request's withdrawal says nothing about this one.
            {
                **_status(
                    {"status": "True", "message": f"request {REQUEST} answered by run 7"},
                    {"id": 7, "state": "running"},
                ),
                "withdrawnRunRequest": {"request": "older", "message": "run refused: paused"},
            },
            RequestProgress(run_id=7, state="running"),
        ),
    ],
)
def test_progress_of_a_request(status: dict[str, Any], expected: RequestProgress | None) -> None:
    assert progress_of(status, REQUEST) == expected


def test_finished_means_refused_or_terminal() -> None:
    assert RequestProgress(refused="no").finished
    assert RequestProgress(run_id=1, state="failed").finished
    assert not RequestProgress(run_id=1, state="running").finished
