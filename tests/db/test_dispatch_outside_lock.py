"""Jobs are made outside the transaction that holds the dispatch lock (issue 20).

A pass marks its runs dispatched in one short transaction under the lock (each with
its Job's secret's hash) and commits before any Job exists; then it makes the Jobs with
no transaction open; a refused create is undone in another short transaction. Here,
with real parallel connections (each replica its own pool, as the operator's login):
a pod claims while its create call is still in flight; another replica dispatches
meanwhile without waiting, without a second Job and within the cap; a refused create
goes back to waiting in its FIFO place; a create whose answer was lost keeps its mark;
a dispatcher that dies between marking and creating is repaired by the sweep.

The Jobs are recorded, not sent (one namespace that several replicas' clients share);
the cluster tier makes real ones (tests/cluster/test_run_jobs.py for the calls,
tests/cluster/install/test_operator_runs.py for the operator).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, cast

import pytest
from sqlalchemy import Engine, text, update
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import dispatch as queue
from achilles.db.journal import dispatched
from achilles.db.journal import runs as journal
from achilles.db.journal.models import AgentRun
from achilles.db.roles import Component
from achilles.domain.run_secret import RunSecret
from achilles.domain.runs import RunState, RunTrigger
from achilles.k8s.jobs import JobRejected, JobTemplate, RunJobs, SecretKey
from achilles.k8s.run_metadata import RUN_ID_LABEL
from achilles.services.dispatch import DispatchResult, dispatch_queued_runs
from achilles.services.outcomes import MISSING_JOB_GRACE, sweep
from tests.db.factories import make_agent, make_owner, set_settings
from tests.db.logins import login_url, run_pod
from tests.waiting import wait_for

TEMPLATE = JobTemplate(
    namespace="achilles-runs", image="achilles:test", database_secret=SecretKey("db", "url")
)
QUOTA = (
    "403 Forbidden: jobs.batch is forbidden: exceeded quota: runs, requested: count/jobs.batch=1"
)


class _Namespace:
    """The runs namespace: Jobs by run id, each with the secret its manifest carries.
    A create of an existing name changes nothing (409), as the API server does."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.secrets: dict[int, str] = {}
        self.creates: list[int] = []  # every Job made, in order

    def add(self, run_id: int, secret: str) -> bool:
        with self.lock:
            if run_id in self.secrets:
                return False
            self.secrets[run_id] = secret
            self.creates.append(run_id)
            return True


class _Client:
    """One replica's calls on the namespace. `gate`: creates wait until it opens;
    `refuse`: runs whose create the API server refuses; `lose_answer`: runs whose Job
    is made but whose answer never comes back (a read timeout); `on_created`: what
    happens the moment a Job exists (its pod starting), before the call returns."""

    def __init__(
        self,
        namespace: _Namespace,
        *,
        gate: threading.Event | None = None,
        refuse: frozenset[int] = frozenset(),
        lose_answer: frozenset[int] = frozenset(),
        on_created: Callable[[int, str], None] | None = None,
        on_found: Callable[[int], None] | None = None,
    ) -> None:
        self.namespace = namespace
        self.gate = gate
        self.refuse = refuse
        self.lose_answer = lose_answer
        self.on_created = on_created
        self.on_found = on_found
        self.calls: list[int] = []

    def create(self, manifest: dict[str, Any], secret: RunSecret) -> bool:
        run_id = int(manifest["metadata"]["labels"][RUN_ID_LABEL])
        self.calls.append(run_id)
        if self.gate is not None:
            assert self.gate.wait(timeout=60), "the test never opened the gate"
        if run_id in self.refuse:
            raise JobRejected(403, QUOTA)
        if not self.namespace.add(run_id, secret.value):  # the Job and its run Secret
            return False
        if self.on_created is not None:
            self.on_created(run_id, secret.value)
        if run_id in self.lose_answer:
            raise JobRejected(None, "read timed out", maybe_created=True)
        return True

    def run_secret_digest(self, run_id: int) -> bytes | None:
        if self.on_found is not None:
            self.on_found(run_id)
        value = self.namespace.secrets.get(run_id)
        return RunSecret(value).digest if value else None

    def list_run_ids(self) -> set[int]:
        with self.namespace.lock:
            return set(self.namespace.secrets)

    def delete(self, run_id: int) -> bool:
        with self.namespace.lock:
            return self.namespace.secrets.pop(run_id, None) is not None


@pytest.fixture
def operator(database_url: str) -> Iterator[Callable[[], Database]]:
    """Operator replicas: each its own pool, as the operator's login."""
    opened: list[Database] = []

    def replica() -> Database:
        opened.append(Database(login_url(database_url, Component.OPERATOR), pool_size=2))
        return opened[-1]

    yield replica
    for database in opened:
        database.dispose()


def _dispatch(database: Database, client: _Client, batch: int = 200) -> DispatchResult:
    return dispatch_queued_runs(database, cast(RunJobs, client), TEMPLATE, batch=batch)


def _enqueue(db: Engine, count: int) -> list[int]:
    owner = make_owner(db)
    run_ids = []
    for _ in range(count):
        agent_id = make_agent(db, owner)
        with Session(db) as session, session.begin():
            result = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL)
        assert result.state is RunState.QUEUED
        run_ids.append(result.run_id)
    return run_ids


def _row(db: Engine, run_id: int) -> AgentRun:
    with Session(db) as session:
        row = session.get(AgentRun, run_id)
        assert row is not None
        return row


def _executing(db: Engine) -> int:
    with Session(db) as session:
        return queue.count_executing(session)


def _claim_as_pod(database_url: str, run_id: int, secret: str) -> bool:
    """What the run's pod does first: claim as the runner's login with the Job's secret."""
    pod = run_pod(database_url, run_id, secret)
    try:
        with pod.transaction() as session:
            # A claim that had to wait for the dispatching transaction fails the test
            # instead of hanging it.
            session.execute(text("SET LOCAL lock_timeout = '10s'"))
            return journal.claim_run(session, run_id)
    finally:
        pod.dispose()


def _finish(db: Engine, run_ids: list[int]) -> None:
    with Session(db) as session, session.begin():
        for run_id in run_ids:
            assert journal.claim_run(session, run_id)
            assert journal.succeed_run(session, run_id, "done")


def test_a_pod_claims_while_its_create_call_is_still_in_flight(
    db: Engine, database_url: str, operator: Callable[[], Database]
) -> None:
    """The mark commits before any Job exists: a pod that starts at once finds its
    secret's hash (with the Jobs made inside the dispatching transaction, its claim
    would wait on the row until the pass ended)."""
    (run_id,) = _enqueue(db, 1)
    claimed: list[bool] = []
    client = _Client(
        _Namespace(),
        on_created=lambda run, secret: claimed.append(_claim_as_pod(database_url, run, secret)),
    )
    done = _dispatch(operator(), client)
    assert [run.run_id for run in done.created] == [run_id]
    assert claimed == [True]
    assert _row(db, run_id).state == RunState.RUNNING


def test_a_refused_create_is_undone_and_the_run_dispatched_later_in_its_place(
    db: Engine, operator: Callable[[], Database]
) -> None:
    set_settings(db, agent_max_concurrency=3)
    first, refused, third = _enqueue(db, 3)
    namespace = _Namespace()
    database = operator()
    done = _dispatch(database, _Client(namespace, refuse=frozenset({refused})))
    assert sorted(run.run_id for run in done.created) == [first, third]
    assert done.rejected == QUOTA  # the loop backs off
    assert (done.executing, done.waiting) == (2, 1)
    row = _row(db, refused)
    assert (row.state, row.dispatched_at, row.runner_secret_hash) == ("queued", None, None)
    assert _executing(db) == 2

    (later,) = _enqueue(db, 1)  # queued after the refused run: it waits behind it
    done = _dispatch(database, _Client(namespace))  # room for one
    assert [run.run_id for run in done.created] == [refused]  # its FIFO place kept
    assert _row(db, refused).runner_secret_hash == RunSecret(namespace.secrets[refused]).digest
    assert _row(db, later).dispatched_at is None
    assert namespace.creates == [first, third, refused]


def test_a_create_whose_answer_was_lost_keeps_its_mark(
    db: Engine, database_url: str, operator: Callable[[], Database]
) -> None:
    """The Job may exist (it does here): undoing the mark would leave its pod a row
    without its secret's hash. The run keeps its mark and its place under the cap."""
    (run_id,) = _enqueue(db, 1)
    namespace = _Namespace()
    done = _dispatch(operator(), _Client(namespace, lose_answer=frozenset({run_id})))
    assert done.created == []
    assert done.rejected == "read timed out"
    assert _row(db, run_id).dispatched_at is not None
    assert _executing(db) == 1
    assert _claim_as_pod(database_url, run_id, namespace.secrets[run_id])


def test_another_replica_dispatches_while_the_first_is_creating(
    db: Engine, operator: Callable[[], Database]
) -> None:
    """Replica A's creates hang (a slow API server). B takes the dispatch lock at once
    (A holds no transaction), takes the next runs in FIFO order under the cap and makes
    their Jobs; a third pass finds the cap full. No run gets a second Job."""
    set_settings(db, agent_max_concurrency=4)
    runs = _enqueue(db, 6)
    namespace = _Namespace()
    gate = threading.Event()
    slow = _Client(namespace, gate=gate)
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(_dispatch, operator(), slow, 2)
        wait_for(lambda: len(slow.calls) == 2, timeout=30, what="A's two creates in flight")

        other = operator()
        second = _on_a_thread(lambda: _dispatch(other, _Client(namespace), 2))
        assert [run.run_id for run in second.created] == runs[2:4]
        assert _dispatch(other, _Client(namespace)).created == []  # 4 executing: the cap
        assert not first.done()
        gate.set()
        assert [run.run_id for run in first.result(timeout=60).created] == runs[:2]
    assert sorted(namespace.creates) == runs[:4]  # each once
    assert _executing(db) == 4


def test_a_pass_chooses_its_next_batch_while_its_slowest_create_is_in_flight(
    db: Engine, operator: Callable[[], Database]
) -> None:
    """A burst is bound by the API server's creates, not by the passes (issue 40): the
    create threads do not wait for a batch's slowest create before the next batch is
    chosen and made. FIFO and one Job a run hold."""
    set_settings(db, agent_max_concurrency=10)
    runs = _enqueue(db, 4)
    namespace = _Namespace()
    slowest_may_end = threading.Event()

    class _OneSlow(_Client):
        def create(self, manifest: dict[str, Any], secret: RunSecret) -> bool:
            if int(manifest["metadata"]["labels"][RUN_ID_LABEL]) == runs[1]:
                assert slowest_may_end.wait(timeout=60), "the test never let it end"
            return super().create(manifest, secret)

    with ThreadPoolExecutor(max_workers=1) as pool:
        passing = pool.submit(_dispatch, operator(), _OneSlow(namespace), 2)
        try:
            wait_for(
                lambda: set(runs[2:]) <= set(namespace.creates),
                timeout=30,
                what="the next batch's Jobs while the first batch's slowest create hangs",
            )
            assert runs[1] not in namespace.creates
        finally:
            slowest_may_end.set()
        done = passing.result(timeout=60)
    assert [run.run_id for run in done.created] == runs  # one pass, in FIFO order
    assert sorted(namespace.creates) == runs  # each once
    assert _executing(db) == 4


def _on_a_thread(call: Callable[[], DispatchResult]) -> DispatchResult:
    """`call` on a thread of its own, waited for with a timeout: a dispatch that blocked
    on the other replica's lock would fail the test instead of hanging it."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result(timeout=30)


def test_replicas_at_once_keep_the_cap_fifo_and_one_job_per_run(
    db: Engine, operator: Callable[[], Database]
) -> None:
    """Four replicas dispatch at the same instant, round after round, while runs end.
    Whenever a Job is made, no more runs execute than the cap; every run gets one Job;
    the Jobs are made in the order the runs were queued, a round at a time."""
    cap, replicas = 5, 4
    set_settings(db, agent_max_concurrency=cap)
    runs = _enqueue(db, 16)
    namespace = _Namespace()
    seen: list[int] = []

    def count(_run: int, _secret: str) -> None:
        seen.append(_executing(db))

    clients = [_Client(namespace, on_created=count) for _ in range(replicas)]
    databases = [operator() for _ in range(replicas)]
    barrier = threading.Barrier(replicas)

    def one(index: int) -> DispatchResult:
        barrier.wait(timeout=30)
        return _dispatch(databases[index], clients[index], batch=2)

    made: list[list[int]] = []
    with ThreadPoolExecutor(max_workers=replicas) as pool:
        while len(namespace.creates) < len(runs):
            before = len(namespace.creates)
            results = list(pool.map(one, range(replicas)))
            assert all(result.rejected is None for result in results)
            new = namespace.creates[before:]
            assert new, "a round with room made no Job"
            made.append(sorted(new))
            assert _executing(db) <= cap
            _finish(db, new[: len(new) // 2 + 1])  # some end, some go on running
    assert max(seen) <= cap
    assert sorted(namespace.creates) == runs  # one Job each
    assert [run for round_ in made for run in round_] == runs  # FIFO, round by round


def test_a_dispatcher_that_dies_between_marking_and_creating_is_repaired_by_the_sweep(
    db: Engine, operator: Callable[[], Database]
) -> None:
    """Its runs stay marked with no Job: they count as executing (the safe side) until
    the sweep finds their Jobs missing past MISSING_JOB_GRACE and requeues them."""
    set_settings(db, agent_max_concurrency=2)
    dying, waiting = _enqueue(db, 2)
    namespace = _Namespace()

    class _Killed(Exception):
        pass

    class _Dies(_Client):
        def create(self, manifest: dict[str, Any], secret: RunSecret) -> bool:
            raise _Killed  # the process ends here: no undo, no Job

    with pytest.raises(_Killed):
        _dispatch(operator(), _Dies(namespace), batch=1)
    assert _row(db, dying).dispatched_at is not None
    set_settings(db, agent_max_concurrency=1)
    database = operator()
    client = _Client(namespace)
    assert _dispatch(database, client).created == []  # the marked run holds the one slot
    assert (
        sweep(database, cast(RunJobs, client), client.list_run_ids()).requeued == []
    )  # within the grace

    with Session(db) as session, session.begin():
        grace_ago = text(f"now() - interval '{MISSING_JOB_GRACE.total_seconds() + 1} seconds'")
        session.execute(
            update(AgentRun).where(AgentRun.id == dying).values(dispatched_at=grace_ago)
        )
    assert sweep(database, cast(RunJobs, client), client.list_run_ids()).requeued == [dying]
    done = _dispatch(database, client)
    assert [run.run_id for run in done.created] == [dying]  # its place ahead of `waiting`
    assert _row(db, dying).runner_secret_hash == RunSecret(namespace.secrets[dying]).digest
    assert _row(db, waiting).dispatched_at is None


def test_the_sweep_leaves_a_run_marked_again_since_it_looked(db: Engine) -> None:
    """The sweep's release is guarded by the instant of the mark: a run marked again
    after the sweep read it (its Job perhaps being made now) keeps its mark."""
    (run_id,) = _enqueue(db, 1)
    secret = RunSecret.new()
    with Session(db) as session, session.begin():
        now = session.execute(text("SELECT now()")).scalar_one()
        queue.mark_dispatched(session, {run_id: secret.digest}, now)
    with Session(db) as session, session.begin():
        dispatched.release_dispatch(session, [run_id], dispatched_before=now - timedelta(seconds=1))
    assert _row(db, run_id).runner_secret_hash == secret.digest
    with Session(db) as session, session.begin():
        dispatched.release_dispatch(session, [run_id], dispatched_before=now + timedelta(seconds=1))
    assert _row(db, run_id).dispatched_at is None


def test_a_job_from_an_earlier_dispatch_lends_its_secret_to_the_row(
    db: Engine, database_url: str, operator: Callable[[], Database]
) -> None:
    """AlreadyExists: the Job's pod holds the earlier dispatch's secret, so the row takes
    its hash (one short transaction) and that pod claims. If the row moved on before
    (released by a sweep meanwhile), nothing is written and the next pass tries again."""
    first, second = _enqueue(db, 2)
    namespace = _Namespace()
    for run_id in (first, second):
        namespace.add(run_id, RunSecret.new().value)  # made by a dispatch whose mark is gone
    database = operator()

    def released_meanwhile(run_id: int) -> None:
        if run_id == second:
            with Session(db) as session, session.begin():
                dispatched.release_dispatch(session, [run_id])

    done = _dispatch(database, _Client(namespace, on_found=released_meanwhile))
    assert [run.run_id for run in done.created] == [first]
    assert _claim_as_pod(database_url, first, namespace.secrets[first])
    assert _row(db, second).runner_secret_hash is None  # not ours to change any more

    done = _dispatch(database, _Client(namespace))
    assert [run.run_id for run in done.created] == [second]
    assert _claim_as_pod(database_url, second, namespace.secrets[second])
    assert namespace.creates == [first, second]  # the earlier Jobs, no new ones
