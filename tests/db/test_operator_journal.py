"""The operator's database guarantees, with real parallel connections (DESIGN.md §4):
one row per run request across replicas, one scheduled run per slot with two scheduler
passes at once, missed slots collapsing, the concurrency cap and FIFO decided in the
database, zone changes noticed, model withdrawal stopping agents for good."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast
from zoneinfo import ZoneInfo

import pytest
from kubernetes.client import ApiClient
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import catalogue
from achilles.db.journal import dispatch as queue
from achilles.db.journal import runs as journal
from achilles.db.journal.schedule import refresh_next_run, take_agents_to_reschedule
from achilles.domain.budget import week_window
from achilles.domain.pod_outcome import START_DEADLINE, ContainerObservation, PodObservation
from achilles.domain.run_secret import RunSecret
from achilles.domain.runs import RunState, RunTrigger, SkipReason
from achilles.k8s.jobs import RunJobs
from achilles.services import outcomes, scheduler
from tests.db.factories import make_agent, make_model, make_owner, set_settings

T = TypeVar("T")
PARALLEL = 20


def _parallel(engine: Engine, work: Callable[[Session], T], writers: int = PARALLEL) -> list[T]:
    barrier = threading.Barrier(writers)

    def one(_: int) -> T:
        with Session(engine) as session, session.begin():
            session.connection()  # each holds its own connection before the start line
            barrier.wait(timeout=60)
            return work(session)

    with ThreadPoolExecutor(max_workers=writers) as pool:
        return list(pool.map(one, range(writers)))


def _count(engine: Engine, sql: str, **params: object) -> int:
    return int(_one(engine, sql, **params)[0])


def _rows(engine: Engine, sql: str, **params: object) -> list[Any]:
    with engine.begin() as conn:
        return list(conn.execute(text(sql), params).all())


def _one(engine: Engine, sql: str, **params: object) -> Any:
    with engine.begin() as conn:
        return conn.execute(text(sql), params).one()


@pytest.mark.parametrize("round_", range(3))
def test_one_request_seen_by_many_replicas_writes_one_row(db: Engine, round_: int) -> None:
    agent_id = make_agent(db)
    request = f"2026-12-01T09:00:00.{round_:06d}Z"
    results = _parallel(
        db, lambda s: journal.enqueue_run(s, agent_id, RunTrigger.MANUAL, request_key=request)
    )
    assert _count(db, "SELECT count(*) FROM agent_runs WHERE agent_id = :a", a=agent_id) == 1
    assert {r.run_id for r in results} == {results[0].run_id}
    assert sum(not r.duplicate_request for r in results) == 1
    assert all(r.state is RunState.QUEUED for r in results)


def test_a_request_refused_by_overlap_is_still_answered_once(db: Engine) -> None:
    agent_id = make_agent(db)
    with Session(db) as session, session.begin():
        journal.enqueue_run(session, agent_id, RunTrigger.SCHEDULED)
    results = _parallel(
        db, lambda s: journal.enqueue_run(s, agent_id, RunTrigger.MANUAL, request_key="r2")
    )
    assert {(r.state, r.reason) for r in results} == {
        (RunState.SKIPPED, SkipReason.ALREADY_RUNNING)
    }
    assert _count(db, "SELECT count(*) FROM agent_runs WHERE request_key = 'r2'") == 1


def _due_agents(db: Engine, count: int, *, hours: int = 6, late: timedelta) -> list[int]:
    owner = make_owner(db)
    ids = [
        make_agent(db, owner, schedule={"type": "interval", "every_hours": hours})
        for _ in range(count)
    ]
    with db.begin() as conn:
        conn.execute(
            text("UPDATE agents SET next_run_at = now() - :late, schedule_zone = 'UTC'"
                 " WHERE id = ANY(:ids)"),
            {"late": late, "ids": ids},
        )  # fmt: skip
    return ids


def test_two_scheduler_passes_at_once_enqueue_each_slot_once(db: Engine, database_url: str) -> None:
    set_settings(db, weekly_token_budget=10**9) if False else None
    ids = _due_agents(db, 40, late=timedelta(seconds=1))
    database = Database(database_url, pool_size=4)
    try:
        barrier = threading.Barrier(2)

        def tick(_: int) -> scheduler.TickResult:
            barrier.wait(timeout=30)
            return scheduler.schedule_due_agents(database, batch=7)

        with ThreadPoolExecutor(max_workers=2) as pool:
            ticks = list(pool.map(tick, range(2)))
    finally:
        database.dispose()
    enqueued = [agent for t in ticks for agent, _ in t.enqueued]
    assert Counter(enqueued) == Counter(ids)
    assert _count(db, "SELECT count(*) FROM agent_runs WHERE agent_id = ANY(:i)", i=ids) == 40
    assert (
        _count(db, "SELECT count(*) FROM agents WHERE id = ANY(:i) AND next_run_at > now()", i=ids)
        == 40
    )


def test_missed_slots_collapse_into_one_run_and_the_grid_is_kept(
    db: Engine, database_url: str
) -> None:
    (agent_id,) = _due_agents(db, 1, hours=6, late=timedelta(hours=20, minutes=30))
    before = _one(db, "SELECT next_run_at FROM agents WHERE id = :a", a=agent_id)[0]
    database = Database(database_url)
    try:
        scheduler.schedule_due_agents(database)
        scheduler.schedule_due_agents(database)
    finally:
        database.dispose()
    assert _count(db, "SELECT count(*) FROM agent_runs WHERE agent_id = :a", a=agent_id) == 1
    after = _one(db, "SELECT next_run_at FROM agents WHERE id = :a", a=agent_id)[0]
    # 20.5 h late on a 6 h grid: the next slot is the 4th after the missed one, in the future.
    assert after - before == timedelta(hours=24)
    assert after > datetime.now(UTC)


_WEEK = week_window(datetime.now(UTC), ZoneInfo("UTC"))


def test_the_cap_is_decided_in_the_database_fifo(db: Engine) -> None:
    set_settings(db, agent_max_concurrency=3)
    owner = make_owner(db)
    run_ids = []
    for _ in range(10):
        agent_id = make_agent(db, owner)
        with Session(db) as session, session.begin():
            run_ids.append(journal.enqueue_run(session, agent_id, RunTrigger.MANUAL).run_id)

    def take(session: Session) -> list[int]:
        taken = queue.take_dispatchable_runs(session, cap=3, batch=10, window=_WEEK)
        queue.mark_dispatched(
            session, {r.run_id: RunSecret.new().digest for r in taken}, datetime.now(UTC)
        )
        return [r.run_id for r in taken]

    taken = [run for batch in _parallel(db, take, writers=5) for run in batch]
    assert sorted(taken) == run_ids[:3], "the oldest three, once each"
    with Session(db) as session, session.begin():
        assert queue.take_dispatchable_runs(session, cap=3, batch=10, window=_WEEK) == []
        journal.claim_run(session, run_ids[0])
        journal.succeed_run(session, run_ids[0], "done")
    with Session(db) as session, session.begin():
        assert [
            r.run_id for r in queue.take_dispatchable_runs(session, cap=3, batch=10, window=_WEEK)
        ] == [run_ids[3]]


def test_an_owner_zone_change_moves_a_calendar_slot(db: Engine) -> None:
    owner = make_owner(db, timezone="Europe/Berlin")
    agent_id = make_agent(
        db, owner, schedule={"type": "calendar", "cadence": "daily", "time": "09:00"}
    )
    with Session(db) as session, session.begin():
        now = datetime.now(UTC)
        refresh_next_run(session, agent_id, now, reset=True)
    berlin = _one(db, "SELECT next_run_at FROM agents WHERE id = :a", a=agent_id)[0]
    with db.begin() as conn:
        conn.execute(
            text("UPDATE users SET timezone = 'America/New_York' WHERE key = :k"), {"k": owner}
        )
    with Session(db) as session, session.begin():
        stale = take_agents_to_reschedule(session, 100)
        assert [a.agent_id for a in stale] == [agent_id]
        refresh_next_run(session, agent_id, datetime.now(UTC), reset=False)
    row = _one(db, "SELECT next_run_at, schedule_zone FROM agents WHERE id = :a", a=agent_id)
    assert row.schedule_zone == "America/New_York"
    assert row.next_run_at != berlin
    assert row.next_run_at.astimezone(UTC).hour in (13, 14)  # 09:00 in New York


def test_model_withdrawal_stops_agents_and_a_new_model_of_that_name_revives_nobody(
    db: Engine,
) -> None:
    make_model(db, "gpt-small")
    agent_id = make_agent(
        db, model_name="gpt-small", schedule={"type": "interval", "every_hours": 1}
    )
    with Session(db) as session, session.begin():
        refresh_next_run(session, agent_id, datetime.now(UTC), reset=True)
        stopped = catalogue.withdraw_model(session, "gpt-small")
    assert [a.agent_id for a in stopped] == [agent_id]
    with Session(db) as session, session.begin():
        catalogue.upsert_model(
            session,
            catalogue.ModelRow("gpt-small", "http://x/v1", "m", None, None, is_default=False),
        )
        refresh_next_run(session, agent_id, datetime.now(UTC), reset=False)
    row = _one(db, "SELECT model_id, next_run_at FROM agents WHERE id = :a", a=agent_id)
    assert row.model_id is None
    assert row.next_run_at is None


def _ended_pod(run_id: int, phase: str, exit_code: int) -> PodObservation:
    return PodObservation(
        run_id=run_id,
        name=f"achilles-run-{run_id}-second",
        phase=phase,
        reason=None,
        message=None,
        created_at=datetime.now(UTC),
        runner=ContainerObservation(terminated_reason="Completed", exit_code=exit_code),
    )


def test_a_second_pod_of_a_claimed_run_that_exits_0_leaves_the_run_alone(
    db: Engine, database_url: str
) -> None:
    """Kubernetes may start a Job's pod twice (its controller, after an API server
    restart, creates a second one: found by `achilles chaos apiserver-restart`). The
    second runner finds the run claimed and exits 0; that must not fail the run the first
    runner is executing. A run no runner claimed still fails when its pod ends."""
    claimed, unclaimed = make_agent(db), make_agent(db)
    with Session(db) as session, session.begin():
        running = journal.enqueue_run(session, claimed, RunTrigger.MANUAL).run_id
        assert journal.claim_run(session, running)
        queued = journal.enqueue_run(session, unclaimed, RunTrigger.MANUAL).run_id
    database = Database(database_url)
    jobs = RunJobs(ApiClient(), "achilles-runs")  # an ended pod's verdict deletes no Job
    try:
        assert outcomes.fold_pod(database, jobs, _ended_pod(running, "Succeeded", 0)) is None
        assert _one(db, "SELECT state FROM agent_runs WHERE id = :r", r=running)[0] == "running"
        failed = outcomes.fold_pod(database, jobs, _ended_pod(queued, "Succeeded", 0))
        assert failed is not None
        assert "without recording an outcome" in failed.error
        # A runner that crashed did end its run, whichever pod it ran in.
        crashed = outcomes.fold_pod(database, jobs, _ended_pod(running, "Failed", 1))
        assert crashed is not None
        assert "exited with code 1" in crashed.error
    finally:
        database.dispose()
    states = dict(
        _rows(db, "SELECT id, state FROM agent_runs WHERE id IN (:a, :b)", a=running, b=queued)
    )
    assert states == {running: "failed", queued: "failed"}


def _waiting_pod(run_id: int, created_at: datetime) -> PodObservation:
    return PodObservation(
        run_id=run_id,
        name=f"achilles-run-{run_id}-waits",
        phase="Pending",
        reason=None,
        message=None,
        created_at=created_at,
        runner=ContainerObservation(
            waiting_reason="CreateContainerConfigError",
            waiting_message='secret "no-such-secret" not found',
        ),
    )


class _Deletions:
    """The runs namespace's Job deletions, as the fold asks for them."""

    def __init__(self) -> None:
        self.deleted: list[int] = []

    def delete(self, run_id: int) -> bool:
        self.deleted.append(run_id)
        return True


def test_a_pod_waiting_unchanged_past_the_start_deadline_fails_its_run_on_the_sweep(
    db: Engine, database_url: str
) -> None:
    """A pod waiting on a Secret that does not exist never changes after its first
    status, so no watch event comes once it passes START_DEADLINE: the sweeper's pass
    judges the pods still Pending again (found by `achilles chaos bad-input`, no-secret).
    A pod waiting less than the deadline is left to wait."""
    stuck_agent, young_agent = make_agent(db), make_agent(db)
    with Session(db) as session, session.begin():
        stuck = journal.enqueue_run(session, stuck_agent, RunTrigger.MANUAL).run_id
        young = journal.enqueue_run(session, young_agent, RunTrigger.MANUAL).run_id
    now = datetime.now(UTC)
    pending = [
        _waiting_pod(stuck, now - START_DEADLINE - timedelta(seconds=5)),
        _waiting_pod(young, now),
    ]
    jobs = _Deletions()
    database = Database(database_url)
    try:
        folded = outcomes.fold_pods(database, cast(RunJobs, jobs), pending)
        again = outcomes.fold_pods(database, cast(RunJobs, jobs), pending)
    finally:
        database.dispose()
    assert [run.run_id for run in folded.failed] == [stuck]
    assert folded.settled == {pending[0].name}  # the young pod is judged again later
    assert again.failed == []  # the guarded transition: folding twice writes once
    assert jobs.deleted == [stuck]  # its pod would hold a slot
    rows = dict(
        (r.id, (r.state, r.error))
        for r in _rows(
            db, "SELECT id, state, error FROM agent_runs WHERE id IN (:a, :b)", a=stuck, b=young
        )
    )
    assert rows[young] == ("queued", None)
    state, error = rows[stuck]
    assert state == "failed"
    assert "did not start within 60 s: CreateContainerConfigError" in error
    assert 'secret "no-such-secret" not found' in error


def test_an_installation_sets_its_own_start_deadline(db: Engine, database_url: str) -> None:
    """`ACHILLES_START_DEADLINE_SECONDS` (OperatorConfig.start_deadline) is the deadline
    every fold judges by, and the error names it."""
    agent = make_agent(db)
    with Session(db) as session, session.begin():
        run = journal.enqueue_run(session, agent, RunTrigger.MANUAL).run_id
    pods = [_waiting_pod(run, datetime.now(UTC) - timedelta(seconds=20))]
    jobs = cast(RunJobs, _Deletions())
    database = Database(database_url)
    try:
        patient = outcomes.fold_pods(
            database, jobs, pods, start_deadline=timedelta(seconds=300)
        ).failed
        strict = outcomes.fold_pods(
            database, jobs, pods, start_deadline=timedelta(seconds=15)
        ).failed
    finally:
        database.dispose()
    assert patient == []
    assert [failed.run_id for failed in strict] == [run]
    assert "did not start within 15 s: CreateContainerConfigError" in strict[0].error
