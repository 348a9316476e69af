"""Manual runs: a new `achilles.io/run-requested-at` value is one request, honoured once.

The request's value is recorded with the row it caused (`agent_runs.request_key`,
unique per agent), so two replicas that both see it, or one that retries after a
crash, write one row between them. A closed durable lock refuses the request with
no row (DESIGN.md §4); budget and overlap write a skipped row. A lock that closes while
the run waits for its turn removes the row (`services/dispatch.py`), and the status's
`withdrawnRunRequest` tells the requester it was refused after all.
"""

from __future__ import annotations

from dataclasses import dataclass

from achilles.db.database import Database
from achilles.db.journal.agents import agent_id_by_uid
from achilles.db.journal.runs import EnqueueResult, enqueue_run
from achilles.domain.gates import LockReason
from achilles.domain.runs import RunTrigger
from achilles.errors import StartRefused
from achilles.services.status import LOCK_MESSAGES


@dataclass(frozen=True)
class RequestOutcome:
    request: str
    result: EnqueueResult | None  # None: refused
    refusal: str | None = None
    closed_locks: tuple[str, ...] = ()  # a refusal's (LockReason codes)


def handle_run_request(database: Database, agent_uid: str, request: str) -> RequestOutcome:
    with database.transaction() as session:
        agent_id = agent_id_by_uid(session, agent_uid)
        if agent_id is None:
            return RequestOutcome(
                request,
                None,
                "run refused: " + LOCK_MESSAGES[LockReason.OWNER_MISSING],
                (LockReason.OWNER_MISSING,),
            )
        try:
            result = enqueue_run(session, agent_id, RunTrigger.MANUAL, request_key=request)
        except StartRefused as refused:
            messages = [LOCK_MESSAGES[LockReason(code)] for code in refused.reasons]
            refusal = "run refused: " + "; ".join(messages)
            return RequestOutcome(request, None, refusal, refused.reasons)
    return RequestOutcome(request, result)


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
