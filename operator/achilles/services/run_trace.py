"""A run's trace as people read it (issue 21): what the run used, and its steps.

Read-only. `run_trace` is the CLI's (every run); `owned_run_trace` the HTTP API's, for a
scope as in `services.owner_reads`: a run outside it reads exactly like a missing one.
"""

from __future__ import annotations

from dataclasses import dataclass

from achilles.db.database import Database
from achilles.db.journal import run_trace as reads
from achilles.db.journal.run_trace import StepRow
from achilles.domain.run_trace import RunUsed
from achilles.errors import NotFound
from achilles.services import owner_reads

__all__ = [
    "RunTrace",
    "StepRow",
    "owned_run_trace",
    "run_trace",
    "step_record",
    "trace_of_found_run",
]


@dataclass(frozen=True)
class RunTrace:
    run_id: int
    used: RunUsed | None  # None until the run's runner recorded it
    steps: list[StepRow]  # empty unless asked for


def run_trace(database: Database, run_id: int, *, steps: bool) -> RunTrace:
    """What run `run_id` used, and its steps if asked; `NotFound` if there is no such run."""
    with database.transaction() as session:
        if not reads.run_exists(session, run_id):
            raise NotFound(f"run {run_id} does not exist")
        return RunTrace(
            run_id=run_id,
            used=reads.used_by_run(session, run_id),
            steps=reads.run_steps(session, run_id) if steps else [],
        )


def owned_run_trace(
    database: Database, run_id: int, owner_key: str | None, *, steps: bool
) -> RunTrace:
    """`run_trace` of a run in the scope (an owner's key, or None for every owner)."""
    owner_reads.find_run(database, run_id, owner_key)  # NotFound outside the scope
    return trace_of_found_run(database, run_id, steps=steps)


def trace_of_found_run(database: Database, run_id: int, *, steps: bool) -> RunTrace:
    """`run_trace` of a run the caller has found in its scope already."""
    with database.reads() as connection:
        return RunTrace(
            run_id=run_id,
            used=reads.used_by_run(connection, run_id),
            steps=reads.run_steps(connection, run_id) if steps else [],
        )


def step_record(step: StepRow) -> dict[str, object]:
    """A step as the CLI's JSON and the API show it: the arguments' digest as hex."""
    record: dict[str, object] = step._asdict()
    digest = step.argument_sha256
    record["argument_sha256"] = None if digest is None else bytes(digest).hex()
    return record
