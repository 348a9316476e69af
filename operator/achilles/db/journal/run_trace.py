"""A run's trace (0012_run_steps): its steps, and what it used.

The runner's writes are guarded like its other journal writes: steps go in only while
the run is `running` (the statement locks the row and inserts nothing otherwise; for a
runner's login the row-level security of 0012 refuses any other run's or an ended run's
steps too), and what the run used is written once, while it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, select, text, update
from sqlalchemy.orm import Session

from achilles.db.journal.models import AgentRun, AgentRunStep
from achilles.domain.run_trace import NumberedStep, RunUsed
from achilles.domain.runs import RunState

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
)
_NAMES = ", ".join(name for name, _ in _COLUMNS)
# One statement whatever the number of steps: the row locked while it is running (so no
# reaper can end it before this transaction commits), then one row per array element.
_INSERT_STEPS = text(
    "WITH run AS (SELECT id FROM agent_runs WHERE id = :run_id AND state = 'running'"
    " FOR UPDATE)"
    f" INSERT INTO agent_run_steps (run_id, {_NAMES})"
    f" SELECT run.id, {', '.join(f's.{name}' for name, _ in _COLUMNS)} FROM run,"
    f" unnest({', '.join(f'CAST(:{name} AS {kind}[])' for name, kind in _COLUMNS)})"
    f" AS s({_NAMES})"
)


def insert_steps(session: Session, run_id: int, steps: Sequence[NumberedStep]) -> bool:
    """Insert `steps` of the run in one statement; False (nothing written) when the run
    is no longer running."""
    if not steps:
        return True
    params: dict[str, Any] = {"run_id": run_id}
    for name, _ in _COLUMNS:
        params[name] = [_value(numbered, name) for numbered in steps]
    inserted = session.execute(_INSERT_STEPS, params)
    return bool(getattr(inserted, "rowcount", 0))


def _value(numbered: NumberedStep, name: str) -> object:
    if name == "seq":
        return numbered.seq
    value = getattr(numbered.step, name)
    return None if value is None else str(value) if name in ("kind", "status") else value


def record_used(session: Session, run_id: int, used: RunUsed) -> bool:
    """What the run used, written while it is running; False when it no longer is."""
    changed = session.execute(
        update(AgentRun)
        .where(AgentRun.id == run_id, AgentRun.state == RunState.RUNNING)
        .values(
            used_model=used.model,
            used_endpoint_host=used.endpoint_host,
            used_provider_model=used.provider_model,
            used_prompt_sha256=used.prompt_sha256,
            used_tools=list(used.tools),
        )
        .returning(AgentRun.id)
    ).first()
    return changed is not None


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


def run_steps(session: Session | Connection, run_id: int) -> list[StepRow]:
    """The run's steps in order (at most 201 rows: the cap and its marker)."""
    columns = [getattr(AgentRunStep, name) for name in StepRow._fields]
    rows = session.execute(
        select(*columns).where(AgentRunStep.run_id == run_id).order_by(AgentRunStep.seq)
    ).all()
    return [StepRow._make(row) for row in rows]
