"""The run's own journal writes: the few operations a runner performs on its row.

Each operation is its own short transaction, so a run's progress (tokens,
heartbeats) is durable as it goes and a crash loses at most the step in
flight. A run's steps (`domain/run_trace.py`) ride on these writes: the steps recorded
since the last write go in the same statement as the write (and only if it changed the
row), so steps cost no transaction nor round trip of their own; what the run used rides
on its first write the same way.

Every journal write is guarded by state (see `achilles.db.journal.runs`): False
means the row is no longer `running` (reaped, or finished elsewhere) and
the runner must stop writing.
"""

from __future__ import annotations

from collections.abc import Sequence

from achilles.db.database import Database
from achilles.db.journal import run_trace
from achilles.db.journal import runs as journal
from achilles.db.journal.run_context import claim_and_load, load_run_spec
from achilles.db.knowledge.store import PostgresKnowledgeStore
from achilles.domain.run_spec import RunSpec
from achilles.domain.run_trace import NumberedStep, RunUsed
from achilles.domain.runs import FailReason

# Long enough for a useful traceback summary, short enough for a status column.
MAX_ERROR_CHARS = 4000


def clip_error(error: str) -> str:
    if len(error) > MAX_ERROR_CHARS:
        return error[: MAX_ERROR_CHARS - 3] + "..."
    return error


class RunJournal:
    """A run's writes, on the process's one `Database`."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def knowledge_store(self) -> PostgresKnowledgeStore:
        return PostgresKnowledgeStore(self.database.sessions)

    def claim(self, run_id: int) -> RunSpec | None:
        with self.database.transaction() as session:
            return claim_and_load(session, run_id)

    def load(self, run_id: int) -> RunSpec | None:
        """The spec of a run claimed already (`achilles.db.run_claim`); None if it is gone."""
        with self.database.transaction() as session:
            return load_run_spec(session, run_id)

    def heartbeat(self, run_id: int) -> bool:
        with self.database.transaction() as session:
            return journal.record_heartbeat(session, run_id)

    def add_tokens(
        self,
        run_id: int,
        tokens: int,
        steps: Sequence[NumberedStep] = (),
        used: RunUsed | None = None,
    ) -> bool:
        with self.database.transaction() as session:
            if steps or used is not None:
                write = _with_used(run_trace.tokens_write(tokens), used)
                return run_trace.write_with_steps(session, run_id, write, steps)
            return journal.add_tokens(session, run_id, tokens)

    def succeed(
        self,
        run_id: int,
        output: str,
        steps: Sequence[NumberedStep] = (),
        used: RunUsed | None = None,
    ) -> bool:
        with self.database.transaction() as session:
            if steps or used is not None:
                write = _with_used(run_trace.succeed_write(output), used)
                return run_trace.write_with_steps(session, run_id, write, steps)
            return journal.succeed_run(session, run_id, output)

    def fail(
        self,
        run_id: int,
        reason: FailReason,
        error: str,
        steps: Sequence[NumberedStep] = (),
        used: RunUsed | None = None,
    ) -> bool:
        with self.database.transaction() as session:
            if steps or used is not None:
                write = _with_used(run_trace.fail_write(reason, clip_error(error)), used)
                return run_trace.write_with_steps(session, run_id, write, steps)
            return journal.fail_run(session, run_id, reason, clip_error(error))


def _with_used(write: run_trace.RunWrite, used: RunUsed | None) -> run_trace.RunWrite:
    return write if used is None else write.with_used(used)
