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

It is also the one place that sees every step and the run's end, so the run's trace
(OpenTelemetry, when on: `runner/tracing.py`) is told here too: each step kept, and the
terminal write that went in.
"""

from __future__ import annotations

import threading
from typing import Protocol

from achilles.domain.run_trace import NumberedStep, RunUsed, Step, StepNumbering
from achilles.domain.runs import FailReason, RunState
from achilles.services.run_journal import RunJournal


class StepObserver(Protocol):
    """Told of each step the journal keeps (the cap's marker included) and of the run's
    terminal write once it went in."""

    def on_step(self, step: Step) -> None: ...

    def on_end(self, state: RunState, reason: str | None) -> None: ...


class StepJournal:
    """`runner.loop.RunJournal` for one run id, steps included."""

    def __init__(
        self,
        database: RunJournal,
        run_id: int,
        used: RunUsed | None = None,
        observer: StepObserver | None = None,
    ) -> None:
        self._db = database
        self._observer = observer
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
        if numbered is not None and self._observer is not None:
            self._observer.on_step(numbered.step)

    def add_tokens(self, tokens: int) -> bool:
        with self._lock:
            return self._db.add_tokens(self._run_id, tokens, *self._take())

    def succeed(self, output: str) -> bool:
        with self._lock:
            written = self._db.succeed(self._run_id, output, *self._take())
        if written and self._observer is not None:
            self._observer.on_end(RunState.SUCCEEDED, None)
        return written

    def fail(self, reason: FailReason, error: str) -> bool:
        with self._lock:
            written = self._db.fail(self._run_id, reason, error, *self._take())
        if written and self._observer is not None:
            self._observer.on_end(RunState.FAILED, str(reason))
        return written

    def _take(self) -> tuple[list[NumberedStep], RunUsed | None]:
        # Taken for good: a write refused (the run ended) or failed (the database gone;
        # the run then fails or is reaped) must not repeat them on a later write.
        taken, self._pending = self._pending, []
        used, self._used = self._used, None
        return taken, used
