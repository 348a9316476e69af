"""The run journal (`agent_runs`): enqueue through the start gates, then guarded transitions.

Every transition is one `UPDATE ... WHERE id = :id AND state IN (<sources>)`, the
sources being what the run state machine (`achilles.domain.runs`) allows for the
target; a function returns False when the row was no longer there (reaped, finished
elsewhere), and callers must then stop writing. A trigger in the schema additionally
refuses any update of a terminal row.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Set
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import (
    ColumnElement,
    TextClause,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session

from achilles.db.journal.models import Agent, AgentRun
from achilles.db.journal.settings import Settings, database_now, load_settings
from achilles.db.journal.start_gates import enqueue_if_open
from achilles.domain.budget import week_window
from achilles.domain.gates import closed_locks, is_budget_exhausted
from achilles.domain.runs import (
    STALE_AFTER,
    FailReason,
    RunState,
    RunTrigger,
    SkipReason,
    in_definition_order,
    states_that_may_become,
)
from achilles.errors import StartRefused


@dataclass(frozen=True)
class EnqueueResult:
    run_id: int
    state: RunState
    reason: SkipReason | None = None
    # True when this request was already answered by an earlier row (another replica,
    # or a retry): `run_id` is that row, and nothing was written now.
    duplicate_request: bool = False

    @property
    def is_queued(self) -> bool:
        return self.state is RunState.QUEUED


def enqueue_run(
    session: Session,
    agent_id: int,
    trigger: RunTrigger,
    *,
    now: datetime | None = None,
    request_key: str | None = None,
    scheduled_for: datetime | None = None,
    settings: Settings | None = None,
) -> EnqueueResult:
    """Try to start a run of the agent, inside the caller's transaction.

    Durable locks closed -> `StartRefused`, and no row. Budget exhausted ->
    a `skipped/budget_exceeded` row. Another run active -> the partial unique
    index refuses the insert and a `skipped/already_running` row is written.
    With `request_key` (a manual request's identity), a request that already has a
    row is answered by that row and nothing is written (`duplicate_request`).
    `settings`: the platform settings this transaction already read (the scheduler
    reads them once per batch); read here otherwise.

    One statement in the common case (`achilles bench journal` measures it against a raw
    INSERT): the locks with the owner's weekly tokens, and the queued row inserted when
    they are open; `domain/gates.py` decides from the values it returns. The
    one-active-run index decides through `ON CONFLICT DO NOTHING` (no savepoint): it
    waits for a concurrent insert of the same agent like a unique violation would, and
    no row back means another run is active (or, with `request_key`, that the request
    has its row). A skipped row is a second statement.
    """
    now = now or database_now(session)
    if request_key is not None:
        earlier = _run_for_request(session, agent_id, request_key)
        if earlier is not None:
            return earlier
    settings = settings or load_settings(session)
    row = {
        "agent_id": agent_id,
        "trigger": trigger,
        "created_at": now,
        "request_key": request_key,
        "scheduled_for": scheduled_for,
    }
    gates = enqueue_if_open(session, row, week_window(now, settings.zone), settings)
    closed = closed_locks(gates.locks)
    exhausted = is_budget_exhausted(gates.used, settings.weekly_token_budget)
    if gates.run_id is not None and (closed or exhausted):  # pragma: no cover - a bug
        raise RuntimeError(
            f"agent {agent_id}: the start gates in SQL and in domain/gates.py disagree"
            f" (inserted run {gates.run_id}; closed {closed}, budget exhausted {exhausted})"
        )
    if closed:
        raise StartRefused(agent_id, tuple(reason.value for reason in closed))
    if exhausted:
        return _insert_skipped(session, row, SkipReason.BUDGET_EXCEEDED, now)
    if gates.run_id is None:
        # A unique index refused the row: the request's row exists after all (another
        # replica wrote it meanwhile), or another run of the agent is active.
        if request_key is not None:
            earlier = _run_for_request(session, agent_id, request_key)
            if earlier is not None:
                return earlier
        return _insert_skipped(session, row, SkipReason.ALREADY_RUNNING, now)
    return EnqueueResult(run_id=gates.run_id, state=RunState.QUEUED)


def _insert_unless_conflict(session: Session, values: dict[str, object]) -> int | None:
    """INSERT the run; None when a unique index (one active run, request key) refused it."""
    run_id: int | None = session.execute(
        _insert_statement(tuple(sorted(values))), values
    ).scalar_one_or_none()
    return run_id


@functools.cache
def _insert_statement(columns: tuple[str, ...]) -> TextClause:
    # Text, not `postgresql.insert(...).on_conflict_do_nothing()`: SQLAlchemy cannot
    # cache that construct and compiles it again on every call, which costs more than
    # PostgreSQL takes to run it (`achilles bench journal`).
    placeholders = ", ".join(f":{column}" for column in columns)
    return text(
        f"INSERT INTO agent_runs ({', '.join(columns)}) VALUES ({placeholders})"
        " ON CONFLICT DO NOTHING RETURNING id"
    )


def _run_for_request(session: Session, agent_id: int, request_key: str) -> EnqueueResult | None:
    found = session.execute(
        select(AgentRun.id, AgentRun.state, AgentRun.reason).where(
            AgentRun.agent_id == agent_id, AgentRun.request_key == request_key
        )
    ).first()
    if found is None:
        return None
    reason = SkipReason(found.reason) if found.state == RunState.SKIPPED else None
    return EnqueueResult(
        run_id=found.id, state=RunState(found.state), reason=reason, duplicate_request=True
    )


def _answered_elsewhere(session: Session, agent_id: int, request_key: str) -> EnqueueResult:
    # A concurrent transaction committed a row for this request between our look and
    # our insert; its row is the answer.
    earlier = _run_for_request(session, agent_id, request_key)
    if earlier is None:  # pragma: no cover - the index just said it exists
        raise RuntimeError(f"run request {request_key!r} of agent {agent_id} vanished")
    return earlier


def _insert_skipped(
    session: Session, row: dict[str, object], reason: SkipReason, now: datetime
) -> EnqueueResult:
    # `skipped` lies outside the lock's predicate, so this insert never conflicts with
    # it; it can conflict with the request-key index when another replica answered.
    agent_id = int(str(row["agent_id"]))
    request_key = row["request_key"]
    run_id = _insert_unless_conflict(
        session,
        {**row, "state": RunState.SKIPPED, "reason": reason, "tokens_used": 0, "finished_at": now},
    )
    if run_id is None:
        if not isinstance(request_key, str):  # pragma: no cover - only a request key can
            raise RuntimeError(f"a skipped run of agent {agent_id} was refused by an index")
        return _answered_elsewhere(session, agent_id, request_key)
    return EnqueueResult(run_id=run_id, state=RunState.SKIPPED, reason=reason)


def _update_if_in(
    session: Session, run_id: int, states: Iterable[RunState], values: dict[str, object]
) -> bool:
    """One guarded UPDATE: it writes only while the row is in one of `states`."""
    guard: ColumnElement[bool] = AgentRun.state.in_(
        [state.value for state in in_definition_order(states)]
    )
    changed = session.execute(
        update(AgentRun).where(AgentRun.id == run_id, guard).values(**values).returning(AgentRun.id)
    ).first()
    return changed is not None


def _transition(
    session: Session,
    run_id: int,
    target: RunState,
    values: dict[str, object],
    *,
    only_from: frozenset[RunState] | None = None,
) -> bool:
    """Move the row to `target` from a state the run state machine allows
    (`achilles.domain.runs`), or only from `only_from`, a subset of those."""
    sources = states_that_may_become(target)
    if only_from is not None:
        if not only_from <= sources:
            raise ValueError(f"{sorted(only_from - sources)} may not become {target}")
        sources = only_from
    return _update_if_in(session, run_id, sources, {"state": target, **values})


def claim_run(session: Session, run_id: int, *, now: datetime | None = None) -> bool:
    """`queued -> running`; False if the run is no longer queued.

    In the database (`achilles_claim_run`, 0011): it locks the row first, so a runner
    that starts before the dispatching transaction commits waits for it, and a runner
    session must hold the run's secret. `now` backdates the start (tests; a runner's
    session always gets the database's time)."""
    claimed = session.execute(_CLAIM, {"run_id": run_id, "at": now}).scalar_one()
    return bool(claimed)


_CLAIM = text("SELECT achilles_claim_run(:run_id, CAST(:at AS timestamptz))")


def record_heartbeat(session: Session, run_id: int, *, now: datetime | None = None) -> bool:
    now = now or database_now(session)
    return _update_if_in(session, run_id, (RunState.RUNNING,), {"heartbeat_at": now})


def add_tokens(session: Session, run_id: int, tokens: int) -> bool:
    """Count tokens as the run goes, so a crashed run still counts against the budget."""
    if tokens < 0:
        raise ValueError("tokens must be >= 0")
    return _update_if_in(
        session, run_id, (RunState.RUNNING,), {"tokens_used": AgentRun.tokens_used + tokens}
    )


def succeed_run(session: Session, run_id: int, output: str, *, now: datetime | None = None) -> bool:
    """`running -> succeeded`."""
    now = now or database_now(session)
    return _transition(session, run_id, RunState.SUCCEEDED, {"output": output, "finished_at": now})


def fail_run(
    session: Session,
    run_id: int,
    reason: FailReason,
    error: str,
    *,
    now: datetime | None = None,
    from_queued: bool = False,
) -> bool:
    """`running -> failed` (or `queued -> failed` for a pod that never started)."""
    sources = None if from_queued else frozenset({RunState.RUNNING})
    return _fail(session, run_id, reason, error, now, sources)


def skip_queued_run(
    session: Session, run_id: int, reason: SkipReason, *, now: datetime | None = None
) -> bool:
    """`queued -> skipped`: a runtime gate closed while the run waited (the budget, at
    dispatch). It ends as an enqueue refused by that gate would have: no tokens, no start."""
    values = {"reason": reason, "tokens_used": 0, "finished_at": now or database_now(session)}
    return _transition(
        session, run_id, RunState.SKIPPED, values, only_from=frozenset({RunState.QUEUED})
    )


def fail_unclaimed_run(
    session: Session, run_id: int, reason: FailReason, error: str, *, now: datetime | None = None
) -> bool:
    """`queued -> failed` only: a run that no runner has claimed."""
    return _fail(session, run_id, reason, error, now, frozenset({RunState.QUEUED}))


def _fail(
    session: Session,
    run_id: int,
    reason: FailReason,
    error: str,
    now: datetime | None,
    only_from: frozenset[RunState] | None,
) -> bool:
    values = {"reason": reason, "error": error, "finished_at": now or database_now(session)}
    return _transition(session, run_id, RunState.FAILED, values, only_from=only_from)


@dataclass(frozen=True)
class ReapedRun:
    run_id: int
    agent_id: int
    # True: it had no Job, so no pod, and ended `failed/stale` at once; False: it was
    # asked to stop and ends when its pod is gone (its Job is to be deleted with it).
    ended: bool = False


def reap_stale_runs(
    session: Session,
    *,
    now: datetime | None = None,
    stale_after: timedelta = STALE_AFTER,
    with_job: Set[int] | None = None,
) -> list[ReapedRun]:
    """Reap every running row whose heartbeat is older than `stale_after` and that no
    one has asked to stop yet. Seed 002: a silent runner releases its agent, but one
    active run is one runner alive, and a silent runner is not always a dead one (a
    frozen process, a partitioned node). So a run whose Job exists, or may (`with_job`:
    the runs whose Job exists; None: not known), is asked to stop (`stop_reason`
    `stale`, `cancel.py`) and ends `failed/stale` when its pod is gone, holding its agent
    until then; a run with no Job ends `failed/stale` at once."""
    now = now or database_now(session)
    seconds = int(stale_after.total_seconds())
    error = f"no heartbeat for more than {seconds} s; the runner is presumed dead"
    stale = session.execute(
        update(AgentRun)
        .where(
            AgentRun.state == RunState.RUNNING,
            AgentRun.heartbeat_at < now - stale_after,
            AgentRun.stop_requested_at.is_(None),
        )
        .values(stop_requested_at=now, stop_reason=FailReason.STALE, stop_error=error)
        .returning(AgentRun.id, AgentRun.agent_id)
    ).all()
    without_pod = sorted(row.id for row in stale if with_job is not None and row.id not in with_job)
    if without_pod:
        # No pod to wait for: ended now (the trigger `achilles_end_as_asked` makes the
        # end the stop's, `failed/stale` with its error).
        session.execute(
            update(AgentRun)
            .where(AgentRun.id.in_(without_pod))
            .values(state=RunState.FAILED, reason=FailReason.STALE, error=error, finished_at=now)
        )
    return [ReapedRun(row.id, row.agent_id, row.id in without_pod) for row in stale]


def list_run(session: Session, run_id: int) -> tuple[AgentRun, str] | None:
    """One run with its agent's name."""
    row = session.execute(
        select(AgentRun, Agent.name)
        .join(Agent, Agent.id == AgentRun.agent_id)
        .where(AgentRun.id == run_id)
    ).first()
    return None if row is None else (row[0], row[1])


def list_runs(
    session: Session,
    *,
    agent_id: int | None = None,
    states: tuple[RunState, ...] = (),
    limit: int = 50,
) -> list[tuple[AgentRun, str]]:
    """Newest first, with the agent's name."""
    query = select(AgentRun, Agent.name).join(Agent, Agent.id == AgentRun.agent_id)
    if agent_id is not None:
        query = query.where(AgentRun.agent_id == agent_id)
    if states:
        query = query.where(AgentRun.state.in_([s.value for s in states]))
    rows = session.execute(query.order_by(AgentRun.id.desc()).limit(limit)).all()
    return [(row[0], row[1]) for row in rows]
