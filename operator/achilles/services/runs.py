"""Manual runs, the requester's side: how far an Agent's status says a request went
(`achilles run-now` waits on it). Honouring the request (`achilles.io/run-requested-at`,
one value, one run) is the Agent event's reconcile (services/agent_events.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestProgress:
    """What an Agent's status says about one request: answered by which run, how far."""

    refused: str | None = None
    run_id: int | None = None
    state: str | None = None
    reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.refused is not None or self.state in ("succeeded", "failed", "skipped")


def progress_of(status: dict[str, object], request: str) -> RequestProgress | None:
    """None until the operator has handled `request`; then where its run stands."""
    if status.get("lastHandledRunRequest") != request:
        return None
    withdrawn = status.get("withdrawnRunRequest")
    if isinstance(withdrawn, dict) and withdrawn.get("request") == request:
        # Its queued run was removed before it started: a durable lock closed meanwhile.
        return RequestProgress(refused=str(withdrawn.get("message") or "run refused"))
    conditions = status.get("conditions")
    accepted = next(
        (
            c
            for c in (conditions if isinstance(conditions, list) else [])
            if isinstance(c, dict) and c.get("type") == "RunRequestAccepted"
        ),
        None,
    )
    if accepted is None:
        return RequestProgress()
    message = str(accepted.get("message", ""))
    if accepted.get("status") == "False":
        return RequestProgress(refused=message)
    words = message.split()
    run_id = int(words[-1]) if words and words[-1].isdigit() else None
    last = status.get("lastRun")
    if isinstance(last, dict) and run_id is not None and last.get("id") == run_id:
        return RequestProgress(
            run_id=run_id, state=str(last.get("state")), reason=last.get("reason") or None
        )
    return RequestProgress(run_id=run_id)
