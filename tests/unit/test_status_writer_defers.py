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


def test_the_dispatcher_is_busy_during_its_passes_and_a_burst_and_idle_while_it_waits() -> None:
    dispatch_idle = threading.Event()
    dispatch_idle.set()
    stop = threading.Event()
    seen: list[tuple[str, bool]] = []
    burst = DispatchResult(created=[cast(DispatchableRun, object())], waiting=800)
    results = [burst, burst, DispatchResult(created=[cast(DispatchableRun, object())])]

    class RecordedPasses:
        def run(self, loop: str, work: object) -> DispatchResult:
            assert loop == dispatcher.NAME
            seen.append(("pass", dispatch_idle.is_set()))
            return results.pop(0)

    class Woken:
        def wait(self, timeout: float) -> None:
            seen.append(("waits", dispatch_idle.is_set()))
            stop.set()

    reconciler = dispatcher.Dispatcher(
        database=cast(Database, None),
        jobs=cast(RunJobs, None),
        job_template=cast(JobTemplate, None),
        resources=cast(Resources, None),
        spans=NO_SPANS,
        pod_run_ids=lambda: None,
        marks=cast(StatusMarks, None),
        dispatch_idle=dispatch_idle,
    )
    loop = LoopHandle(dispatcher.NAME, stop, cast(Wake, Woken()), cast(Passes, RecordedPasses()))
    dispatcher.run(reconciler, loop)
    # Three passes with no wait between the burst's, then a wait for the next wake.
    assert seen == [("pass", False), ("pass", False), ("pass", False), ("waits", True)]
    assert dispatch_idle.is_set()
