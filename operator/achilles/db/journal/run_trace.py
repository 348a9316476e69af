"""A run's trace (0012_run_steps): its steps, and what it used.

The runner's writes are guarded like its other journal writes: steps go in with one of
the run's guarded writes of its row (tokens, the outcome), in the same statement, and only
when that write changed the row, i.e. while the run was `running` (for a runner's login
the row-level security of 0012 refuses any other run's or an ended run's steps too); what
the run used rides on its first such write (a trigger holds a runner to writing it once).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, TextClause, select, text
from sqlalchemy.orm import Session

from achilles.db.journal.models import AgentRun, AgentRunStep
from achilles.domain.run_trace import NumberedStep, RunUsed
from achilles.domain.runs import FailReason, RunState

_COLUMNS = (
    ("seq", "integer"),
    ("kind", "text"),
    ("started_at", "timestamptz"),
    ("ended_at", "timestamptz"),
    ("latency_ms", "double precision"),
    ("model", "text"),
    ("input_tokens", "bigint"),
    ("output_tokens", "bigint"),
    ("finish_reason", "text"),
    ("tool", "text"),
    ("status", "text"),
    ("argument_bytes", "integer"),
    ("result_bytes", "integer"),
    ("error", "text"),
    ("argument_sha256", "bytea"),
)
_NAMES = ", ".join(name for name, _ in _COLUMNS)
_ARRAYS = ", ".join(f"CAST(:step_{name} AS {kind}[])" for name, kind in _COLUMNS)
_STEPS_FROM_ARRAYS = f"unnest({_ARRAYS}) AS s({_NAMES})"


@dataclass(frozen=True)
class RunWrite:
    """One of the runner's guarded writes of its row, from `running` (the only state a
    runner writes from once it claimed): the SET list and its parameters."""

    assignments: str
    params: dict[str, object]

    def with_used(self, used: RunUsed) -> RunWrite:
        """This write and the record of what the run used (the run's first write)."""
        return RunWrite(
            f"{self.assignments}, used_model = :used_model,"
            " used_endpoint_host = :used_endpoint_host,"
            " used_provider_model = :used_provider_model,"
            " used_prompt_sha256 = :used_prompt_sha256, used_tools = :used_tools",
            {
                **self.params,
                "used_model": used.model,
                "used_endpoint_host": used.endpoint_host,
                "used_provider_model": used.provider_model,
                "used_prompt_sha256": used.prompt_sha256,
                "used_tools": list(used.tools),
            },
        )


def tokens_write(tokens: int) -> RunWrite:
    if tokens < 0:
        raise ValueError("tokens must be >= 0")
    return RunWrite("tokens_used = tokens_used + :tokens", {"tokens": tokens})


def succeed_write(output: str) -> RunWrite:
    return RunWrite(
        f"state = '{RunState.SUCCEEDED}', output = :output, finished_at = now()",
        {"output": output},
    )


def fail_write(reason: FailReason, error: str) -> RunWrite:
    return RunWrite(
        f"state = '{RunState.FAILED}', reason = :reason, error = :error, finished_at = now()",
        {"reason": str(reason), "error": error},
    )


@functools.cache
def _write_with_steps(assignments: str) -> TextClause:
    # One statement, one round trip: the guarded UPDATE, and the steps inserted only when
    # it changed the row. Every part of a statement sees the same snapshot, so the
    # runner's policy (`achilles_run_id()`: its run while running) holds for the steps
    # even when the UPDATE ends the run.
    return text(
        f"WITH run AS (UPDATE agent_runs SET {assignments}"
        f" WHERE id = :run_id AND state = '{RunState.RUNNING}' RETURNING id),"
        f" steps AS (INSERT INTO agent_run_steps (run_id, {_NAMES})"
        f" SELECT run.id, {', '.join(f's.{name}' for name, _ in _COLUMNS)}"
        f" FROM run, {_STEPS_FROM_ARRAYS})"
        " SELECT id FROM run"
    )


def write_with_steps(
    session: Session, run_id: int, write: RunWrite, steps: Sequence[NumberedStep]
) -> bool:
    """`write` to the run's row and insert `steps` with it, in one statement; False (and
    nothing written) when the row is no longer running (reaped, finished elsewhere)."""
    params: dict[str, Any] = {"run_id": run_id, **write.params}
    for name, _ in _COLUMNS:
        # Prefixed: the write's own parameters (`error`, ...) share the statement.
        params[f"step_{name}"] = [_value(numbered, name) for numbered in steps]
    changed = session.execute(_write_with_steps(write.assignments), params).first()
    return changed is not None


def _value(numbered: NumberedStep, name: str) -> object:
    if name == "seq":
        return numbered.seq
    value = getattr(numbered.step, name)
    return None if value is None else str(value) if name in ("kind", "status") else value


def run_exists(session: Session | Connection, run_id: int) -> bool:
    found = session.execute(select(AgentRun.id).where(AgentRun.id == run_id)).first()
    return found is not None


def used_by_run(session: Session | Connection, run_id: int) -> RunUsed | None:
    """What the run used; None before its runner recorded it (or for a run that never
    started)."""
    row = session.execute(
        select(
            AgentRun.used_model,
            AgentRun.used_endpoint_host,
            AgentRun.used_provider_model,
            AgentRun.used_prompt_sha256,
            AgentRun.used_tools,
        ).where(AgentRun.id == run_id)
    ).first()
    if row is None or row.used_model is None:
        return None
    return RunUsed(
        model=row.used_model,
        endpoint_host=row.used_endpoint_host or "",
        provider_model=row.used_provider_model or "",
        prompt_sha256=bytes(row.used_prompt_sha256 or b""),
        tools=tuple(row.used_tools or ()),
    )


class StepRow(NamedTuple):
    seq: int
    kind: str
    started_at: datetime
    ended_at: datetime
    latency_ms: float
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    finish_reason: str | None
    tool: str | None
    status: str | None
    argument_bytes: int | None
    result_bytes: int | None
    error: str | None
    argument_sha256: bytes | None


def run_steps(session: Session | Connection, run_id: int) -> list[StepRow]:
    """The run's steps in order (at most 201 rows: the cap and its marker)."""
    columns = [getattr(AgentRunStep, name) for name in StepRow._fields]
    rows = session.execute(
        select(*columns).where(AgentRunStep.run_id == run_id).order_by(AgentRunStep.seq)
    ).all()
    return [StepRow._make(row) for row in rows]
