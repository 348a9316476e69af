"""A controller's pace (runtime/manager.py, `LoopHandle.drive`): a pass its wake asks for
starts at least `pace` after the last one started, however many wakes came meanwhile
(they make that one pass); a pass its own timer asks for is not held by the pace, nor is
the stop. Real threads and a real `Wake`; the scheduler declares its pace to the manager
(the NOTIFY of each moved slot, hundreds a second at a restart's listing)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import cast

from achilles.handlers import manager as operator_manager
from achilles.handlers.context import RuntimeContext
from achilles.handlers.controllers import scheduler
from achilles.runtime.loops import Passes
from achilles.runtime.manager import LoopHandle, Manager
from achilles.runtime.wake import Wake, Wakes

# Far beyond any pass of these tests: a loop still waiting this long is a failure.
PATIENCE = 30.0


class NoPasses:
    def passed(self, loop: str, seconds: float) -> None:
        pass

    def failed(self, loop: str) -> None:
        pass


class Scripted:
    """A reconcile that records when each pass started and runs the test's step for it
    (the step returns the seconds to the next pass)."""

    def __init__(self, steps: list[Callable[[], float]]) -> None:
        self.steps = steps
        self.starts: list[float] = []
        self.passed = [threading.Event() for _ in steps]

    def __call__(self) -> float:
        index = len(self.starts)
        self.starts.append(time.monotonic())
        after = self.steps[index]()
        self.passed[index].set()
        return after


def _driven(
    name: str, woken: Wake, reconcile: Scripted, pace: float = 0.0
) -> tuple[LoopHandle, threading.Thread]:
    """The loop's handle, its `drive` running `reconcile` on a thread of its own."""
    loop = LoopHandle(name, threading.Event(), woken, Passes(NoPasses()), pace=pace)
    thread = threading.Thread(target=loop.drive, args=(reconcile,), daemon=True)
    thread.start()
    return loop, thread


def _woken_during(woken: Wake, after: float) -> Callable[[], float]:
    """A pass that sets its own loop's wake (a NOTIFY during it) and asks for `after`."""

    def step() -> float:
        woken.set()
        return after

    return step


def _stopped(loop: LoopHandle, thread: threading.Thread) -> None:
    loop.stop.set()
    loop.woken.set()
    thread.join(PATIENCE)
    assert not thread.is_alive()


def test_wakes_during_a_pass_make_one_pass_a_pace_after_it_began() -> None:
    pace = 0.3
    woken = Wake()

    def storm() -> float:
        for _ in range(200):  # as many NOTIFYs as slots moved during the pass
            woken.set()
        return 60.0

    reconcile = Scripted([storm, lambda: 60.0, lambda: 60.0])
    loop, thread = _driven("scheduler", woken, reconcile, pace=pace)
    assert reconcile.passed[1].wait(PATIENCE)
    _stopped(loop, thread)
    # 200 wakes, one pass; it began no sooner than the pace after the first.
    assert len(reconcile.starts) == 2
    assert reconcile.starts[1] - reconcile.starts[0] >= pace


def test_a_pass_due_by_its_timer_is_not_held_by_the_pace() -> None:
    woken = Wake()

    # Woken during the pass, the nearest slot due in 0.05 s.
    reconcile = Scripted([_woken_during(woken, 0.05), lambda: 60.0])
    # A pace of a minute: the second pass comes at the slot, not after the pace.
    loop, thread = _driven("scheduler", woken, reconcile, pace=60.0)
    assert reconcile.passed[1].wait(PATIENCE)
    _stopped(loop, thread)


def test_the_stop_ends_a_paced_wait() -> None:
    woken = Wake()
    reconcile = Scripted([_woken_during(woken, 3600.0), lambda: 60.0])
    loop, thread = _driven("scheduler", woken, reconcile, pace=3600.0)
    assert reconcile.passed[0].wait(PATIENCE)
    _stopped(loop, thread)  # not an hour later
    assert len(reconcile.starts) == 1


def test_without_a_pace_a_wake_during_a_pass_is_the_next_pass_at_once() -> None:
    """The default (every other loop): the dispatcher's wakes are runs to start."""
    woken = Wake()
    reconcile = Scripted([_woken_during(woken, 3600.0), lambda: 3600.0])
    loop, thread = _driven("dispatcher", woken, reconcile)
    assert reconcile.passed[1].wait(PATIENCE)
    _stopped(loop, thread)


def test_the_manager_gives_the_scheduler_its_declared_pace() -> None:
    context = cast(RuntimeContext, None)  # not started: no loop reads it
    manager = Manager(
        operator_manager.CONTROLLERS, context, Wakes(), threading.Event(), Passes(NoPasses())
    )
    paces = {name: handle.pace for name, handle in manager.handles.items()}
    assert paces.pop(scheduler.NAME) == scheduler.SCHEDULER_PACE > 0
    # The others look at once: the dispatcher's wakes are runs to start.
    assert set(paces.values()) == {0.0}
