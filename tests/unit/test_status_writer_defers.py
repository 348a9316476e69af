"""The status writer lets a slot's Jobs go first (handlers/controllers/status_writer.py): a
pass waits while the dispatcher makes Jobs (its passes, and a burst's passes one after
the other), and no longer than `DEFER_FOR_JOBS`."""

from __future__ import annotations

import threading
from typing import cast

import pytest

from achilles.db.database import Database
from achilles.handlers.context import StatusMarks
from achilles.handlers.controllers import dispatcher, status_writer
from achilles.handlers.statuses import StatusQueue, WrittenStatuses
from achilles.k8s.jobs import JobTemplate, RunJobs
from achilles.k8s.objects import Resources
from achilles.runtime.backoff import Backoff
from achilles.runtime.loops import Passes
from achilles.runtime.manager import LoopHandle
from achilles.runtime.wake import Wake
from achilles.services.dispatch import DispatchableRun, DispatchResult
from achilles.telemetry.spans import NO_SPANS


class Statuses:
    """Records when the pass takes the dirty Agents (none, so it writes nothing)."""

    def __init__(self) -> None:
        self.taken = threading.Event()

    def take(self) -> tuple[set[int], set[int]]:
        self.taken.set()
        return set(), set()


def _writer(dispatch_idle: threading.Event) -> tuple[status_writer.StatusWriter, Statuses]:
    """The status writer with its queue; nothing it writes with is reached (no Agent is
    dirty)."""
    statuses = Statuses()
    writer = status_writer.StatusWriter(
        database=cast(Database, None),
        resources=cast(Resources, None),
        statuses=cast(StatusQueue, statuses),
        written=WrittenStatuses(),
        dispatch_idle=dispatch_idle,
    )
    return writer, statuses


def test_a_status_pass_waits_while_the_dispatcher_makes_jobs() -> None:
    dispatch_idle = threading.Event()  # the dispatcher is in a pass
    reconciler, statuses = _writer(dispatch_idle)
    writer = threading.Thread(target=reconciler.write_dirty_statuses)
    writer.start()
    assert not statuses.taken.wait(0.3)  # nothing read while Jobs are being made
    dispatch_idle.set()  # the pass ended with nothing more to dispatch at once
    writer.join(10)
    assert statuses.taken.is_set()


def test_a_status_pass_waits_no_longer_than_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(status_writer, "DEFER_FOR_JOBS", 0.2)
    reconciler, statuses = _writer(threading.Event())  # a burst that does not end
    writer = threading.Thread(target=reconciler.write_dirty_statuses)
    writer.start()
    writer.join(10)
    assert statuses.taken.is_set()


def test_an_idle_dispatcher_holds_no_status_pass() -> None:
    idle = threading.Event()
    idle.set()
    reconciler, statuses = _writer(idle)
    assert reconciler.write_dirty_statuses() is True
    assert statuses.taken.is_set()


class NoPasses:
    def passed(self, loop: str, seconds: float) -> None:
        pass

    def failed(self, loop: str) -> None:
        pass


def _scripted_dispatcher(
    dispatch_idle: threading.Event, results: list[DispatchResult], seen: list[tuple[str, bool]]
) -> dispatcher.Dispatcher:
    class Scripted(dispatcher.Dispatcher):
        """Its passes' results scripted; whether the status writer may write, recorded."""

        def dispatch_once(self) -> DispatchResult:
            seen.append(("pass", self.dispatch_idle.is_set()))
            return results.pop(0)

    return Scripted(
        database=cast(Database, None),
        jobs=cast(RunJobs, None),
        job_template=cast(JobTemplate, None),
        resources=cast(Resources, None),
        spans=NO_SPANS,
        pod_run_ids=lambda: None,
        marks=cast(StatusMarks, None),
        dispatch_idle=dispatch_idle,
    )


class Woken(Wake):
    """The loop's wake: records each wait (its timeout and whether the dispatcher is
    idle meanwhile) and stops the loop after `waits` of them."""

    def __init__(self, stop: threading.Event, idle: threading.Event, waits: int) -> None:
        super().__init__()
        self.stop, self.idle, self.left = stop, idle, waits
        self.seen: list[tuple[float, bool]] = []

    def wait(self, timeout: float) -> bool:
        self.seen.append((timeout, self.idle.is_set()))
        self.left -= 1
        if self.left == 0:
            self.stop.set()
        return False


def test_the_dispatcher_is_busy_during_its_passes_and_a_burst_and_idle_while_it_waits() -> None:
    dispatch_idle = threading.Event()
    dispatch_idle.set()
    stop = threading.Event()
    seen: list[tuple[str, bool]] = []
    burst = DispatchResult(created=[cast(DispatchableRun, object())], waiting=800)
    results = [burst, burst, DispatchResult(created=[cast(DispatchableRun, object())])]
    reconciler = _scripted_dispatcher(dispatch_idle, results, seen)
    woken = Woken(stop, dispatch_idle, waits=1)
    dispatcher.run(reconciler, LoopHandle(dispatcher.NAME, stop, woken, Passes(NoPasses())))
    # Three passes with no wait between the burst's, then a wait for the next wake.
    assert seen == [("pass", False), ("pass", False), ("pass", False)]
    assert woken.seen == [(dispatcher.DISPATCH_TICK, True)]
    assert dispatch_idle.is_set()


def test_a_refused_dispatch_backs_off_through_the_runtime_and_leaves_it_idle() -> None:
    """The API server refused the Jobs (the runs stay queued): the next pass waits out
    the loop's backoff, doubling while refusals go on, and the status writer is not held
    meanwhile; a pass that worked forgets it."""
    dispatch_idle = threading.Event()
    dispatch_idle.set()
    stop = threading.Event()
    seen: list[tuple[str, bool]] = []
    refused = DispatchResult(rejected="the API server refused: 503")
    results = [refused, refused, DispatchResult(), refused]
    reconciler = _scripted_dispatcher(dispatch_idle, results, seen)
    woken = Woken(stop, dispatch_idle, waits=4)
    retry = Backoff(1.0, dispatcher.MAX_BACKOFF)
    loop = LoopHandle(dispatcher.NAME, stop, woken, Passes(NoPasses()), retry)
    dispatcher.run(reconciler, loop)
    assert [idle for _, idle in seen] == [False] * 4
    assert woken.seen == [(1.0, True), (2.0, True), (dispatcher.DISPATCH_TICK, True), (1.0, True)]
