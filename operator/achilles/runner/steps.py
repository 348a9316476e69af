"""One run's journal as the agent loop sees it: its row's writes, and its steps riding on
them.

The loop hands each step over as it ends (`record_step`); this numbers it (the cap and
its `truncated` marker: `domain/run_trace.py`) and keeps it until the run's next write
(tokens after a model call, the outcome), which inserts it in the same transaction. So
a step costs no transaction of its own: a model call's step goes with its tokens, tool
calls' steps with the next model call's, the last ones with the outcome; what the run
used (`RunUsed`) goes with the first write. The loop's
thread and the main thread (a SIGTERM's failure) both write: a lock keeps the numbering
and the hand-over whole.
"""

from __future__ import annotations

import threading

from achilles.domain.run_trace import NumberedStep, RunUsed, Step, StepNumbering
from achilles.domain.runs import FailReason
from achilles.services.run_journal import RunJournal


class StepJournal:
    """`runner.loop.RunJournal` for one run id, steps included."""

    def __init__(self, database: RunJournal, run_id: int, used: RunUsed | None = None) -> None:
        self._db = database
        self._run_id = run_id
        self._lock = threading.Lock()
        self._numbering = StepNumbering()
        self._pending: list[NumberedStep] = []
        self._used = used

    def record_step(self, step: Step) -> None:
        with self._lock:
            numbered = self._numbering.number(step)
            if numbered is not None:
                self._pending.append(numbered)

    def add_tokens(self, tokens: int) -> bool:
        with self._lock:
            return self._db.add_tokens(self._run_id, tokens, *self._take())

    def succeed(self, output: str) -> bool:
        with self._lock:
            return self._db.succeed(self._run_id, output, *self._take())

    def fail(self, reason: FailReason, error: str) -> bool:
        with self._lock:
            return self._db.fail(self._run_id, reason, error, *self._take())

    def _take(self) -> tuple[list[NumberedStep], RunUsed | None]:
        # Taken for good: a write refused (the run ended) or failed (the database gone;
        # the run then fails or is reaped) must not repeat them on a later write.
        taken, self._pending = self._pending, []
        used, self._used = self._used, None
        return taken, used
