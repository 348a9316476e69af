"""Cancelling a run (issue 22), for `achilles runs cancel RUN` (an admin, or any login
that may write runs).

The one place a run ends `failed/cancelled` is `db/journal/cancel.py`'s `cancel_run`: an
owner's request through the portal or the HTTP API (the Agent's `achilles.io/cancel-run`
annotation) reaches it from the Agent event's reconcile (`services/agent_events.py`, which
calls no other service), the CLI through this module; the answer's words are
`domain/run_cancel.py`'s. Each cancel runs in its own transaction (idempotent: a run that ended
already is left as it is and the answer says how it ended). A queued run with no Job
ends at once; a run with a pod, or one being made, is asked to stop and holds its agent
(seed 002: one runner alive per agent) until its pod is gone. The run's Job is the
operator's to delete, with its pods first (foreground propagation): at once when the
operator itself cancelled, otherwise at its sweeper's next pass (`outcomes.sweep`, every
30 s), which also catches a Job the dispatcher made while the cancel landed; the Job's
deletion (the Job watcher) or its absence (the sweep) ends the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from achilles.db.database import Database
from achilles.db.journal import cancel as journal
from achilles.domain.run_cancel import CancelledRun, describe

__all__ = ["CancelRequest", "CancelledRun", "cancel_run", "describe"]


@dataclass(frozen=True)
class CancelRequest:
    run_id: int
    requested_by: str  # who asked, in words ("alice via achilles.io/cancel-run")
    agent_id: int | None = None  # the run must be this agent's (a request on an Agent)


def cancel_run(database: Database, request: CancelRequest) -> CancelledRun:
    """End the run `failed/cancelled` if it is still queued or running; `NotFound` when
    there is no such run (of that agent)."""
    with database.transaction() as session:
        return journal.cancel_run(
            session,
            request.run_id,
            f"cancelled by {request.requested_by}",
            agent_id=request.agent_id,
        )
