"""A loop's failed pass is retried by the runtime in one place (runtime/manager.py,
`LoopHandle.drive`), as a workqueue re-adds a failed key: after its controller's backoff,
doubling with each failure in a row up to its cap, forgotten at the next pass that
worked; a refused pass (None) counts as a failure, a raised one is counted too. The
manager builds each loop's handle with the backoff its controller declares, and its
threads really retry."""

from __future__ import annotations

import threading

from achilles.handlers import manager as operator_manager
from achilles.handlers.controllers import dispatcher, listener, watchers
from achilles.runtime.backoff import Backoff
from achilles.runtime.loops import Passes
from achilles.runtime.manager import LOOP_RETRY, Controller, LoopHandle, Manager, Timer
from achilles.runtime.wake import Wake, Wakes


class Counted:
    """The passes' observer: failed passes per loop."""

    def __init__(self) -> None:
        self.failed_passes: dict[str, int] = {}

    def passed(self, loop: str, seconds: float) -> None:
        pass

    def failed(self, loop: str) -> None:
        self.failed_passes[loop] = self.failed_passes.get(loop, 0) + 1


class Recorded(Wake):
    """A wake that records each wait's timeout instead of waiting (the instants are the
    test's); the stop is set at the last one expected."""

    def __init__(self, stop: threading.Event, waits: int) -> None:
        super().__init__()
        self.stop, self.left = stop, waits
        self.timeouts: list[float] = []

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        self.left -= 1
        if self.left == 0:
            self.stop.set()
        return False


class Failing:
    """A reconciler whose passes go as scripted: an exception is raised, None is a
    refusal, a number is the seconds to its next pass."""

    def __init__(self, script: list[float | Exception | None]) -> None:
        self.script = script
        self.passes = 0

    def __call__(self) -> float | None:
        self.passes += 1
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step


def test_a_failed_pass_is_retried_after_the_loops_backoff_doubling_to_its_cap() -> None:
    stop = threading.Event()
    woken = Recorded(stop, waits=7)
    observer = Counted()
    down = ConnectionError("the database is down")
    reconcile = Failing([down, down, down, None, 5.0, down, 0.0, 7.0])
    loop = LoopHandle("scheduler", stop, woken, Passes(observer), Backoff(1.0, 4.0))
    loop.drive(reconcile)
    # 1, 2, 4, then the cap (the refusal counts); the pass that worked forgets the
    # failures (its own 5 s, then the next failure's 1 s again); a pass asking for
    # none goes on at once.
    assert woken.timeouts == [1.0, 2.0, 4.0, 4.0, 5.0, 1.0, 7.0]
    assert reconcile.passes == 8
    assert observer.failed_passes == {"scheduler": 4}  # the raised ones, counted


def test_the_stop_ends_a_loop_that_keeps_failing() -> None:
    stop = threading.Event()
    woken = Recorded(stop, waits=3)
    reconcile = Failing([ConnectionError("down")] * 3)
    LoopHandle("notifier", stop, woken, Passes(Counted())).drive(reconcile)
    assert woken.timeouts == [LOOP_RETRY.delay(1), LOOP_RETRY.delay(2), LOOP_RETRY.delay(3)]
    assert woken.timeouts == [1.0, 2.0, 4.0]


def test_the_manager_runs_a_failing_controller_until_a_pass_works() -> None:
    """Real threads and waits: a controller declared with a short backoff fails twice,
    then works; the manager's handle carries the declared backoff."""
    stop = threading.Event()
    worked = threading.Event()
    reconcile = Failing([ConnectionError("down"), None, 60.0])
    observer = Counted()

    def run(context: object, loop: LoopHandle) -> None:
        def once() -> float | None:
            after = reconcile()
            if after is not None:
                worked.set()
            return after

        loop.drive(once)

    retry = Backoff(0.01, 0.02)
    declared: Controller[object, str] = Controller(
        "flaky", (Timer(60.0),), "none", "flaky", run, retry=retry
    )
    wakes: Wakes[str] = Wakes()
    runtime = Manager([declared], object(), wakes, stop, Passes(observer))
    assert runtime.handles["flaky"].retry is retry
    runtime.start()
    try:
        assert worked.wait(10)
    finally:
        runtime.shutdown(10)
    assert reconcile.passes == 3
    assert observer.failed_passes == {"flaky": 1}


def _declared(name: str) -> Controller[object, object]:
    (found,) = [c for c in operator_manager.CONTROLLERS if c.name == name]
    return found  # type: ignore[return-value]


def test_the_operators_loops_declare_their_backoff_and_its_workqueues_none() -> None:
    assert _declared("dispatcher").retry == Backoff(1.0, dispatcher.MAX_BACKOFF)
    assert _declared("pod-watch").retry == _declared("job-watch").retry == watchers.RETRY
    assert _declared("listener").retry == listener.RETRY
    for name in ("scheduler", "status", "notifier", "sweeper"):
        assert _declared(name).retry == LOOP_RETRY, name
    for name in ("agents", "catalogue"):
        assert _declared(name).retry is None, name  # their queue retries each key
