"""A manager that declares its controllers, as controller-runtime's does
(`ctrl.NewControllerManagedBy(mgr).For(...).Watches(...).Complete(r)`).

Each `Controller` is registered with its sources (what makes it run: a stream of objects,
a list+watch, a NOTIFY channel, a timer, keys another part requeues, a signal of another
part), the queue it drains and the loop that reconciles it. The `On` sources are the
only wiring: the manager routes each signal to the controller's wake (`Wakes`), so who
wakes whom is the table, not a set of calls spread over the modules. The others say what
else drives the loop (its own timer, a watch it holds, a requeue) and are there to be
read: the table is the operator's whole shape. Each loop takes a reconciler holding
exactly what it uses and a `LoopHandle` the manager builds for it (its stop, wake,
passes and backoff), instead of the process's whole context.

A failed pass is retried in one place, `LoopHandle.drive`, as a workqueue retries a
failed key (controller-runtime's `AddRateLimited` of a controller with one key): after
the controller's declared `Backoff`, doubling with each failure in a row, forgotten at
the next pass that worked. No loop sleeps or catches on its own after a failure.

A controller may declare a `pace`, as a workqueue's overall rate limiter paces one key:
a pass its wake asks for starts at least that long after the one before, and the wakes
meanwhile make that one pass (its timer's passes are on time).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from achilles.runtime.backoff import Backoff
from achilles.runtime.loops import Loops, Passes
from achilles.runtime.wake import Wake, Wakes

C = TypeVar("C")
S = TypeVar("S", bound=Hashable)
T = TypeVar("T")

# A loop's failed pass, retried after 1 s doubling to 30 s unless its controller
# declares otherwise: a pass is one short transaction or a few API calls, so half a
# minute bounds what a dependency's outage costs in failed attempts (two a minute)
# without leaving its return unnoticed for long (a wake cuts the wait short).
LOOP_RETRY = Backoff(1.0, 30.0)


@dataclass(frozen=True)
class LoopHandle:
    """What a loop holds of the manager that runs it: the process's stop, its own wake
    (`woken`, routed by the table's `On` sources), its passes, counted under `name`, and
    the backoff of a failed pass (`retry`, declared with its controller). Beside it the
    loop takes its reconciler, built with exactly the handles it uses, as
    controller-runtime's reconciler struct holds its clients while the controller drives
    it."""

    name: str
    stop: threading.Event
    woken: Wake
    passes: Passes
    retry: Backoff = LOOP_RETRY
    pace: float = 0.0

    def run_pass(self, work: Callable[[], T]) -> T | None:
        """One pass (`Passes.run`): its result, or None when it raised."""
        return self.passes.run(self.name, work)

    def drive(self, reconcile: Callable[[], float | None]) -> None:
        """Run `reconcile` pass after pass until the stop: after each, wait the seconds
        it returned (0: go on at once), cut short by the loop's wake. A pass that raised
        (logged and counted by `Passes.run`) or returned None (it was refused, and said
        why) is a failure: the next waits out `retry` (its first delay, doubling with
        each failure in a row, forgotten at the next pass that worked), cut short by a
        wake too, as a workqueue's put is not held by its key's backoff: something
        happened, so look at once. With a `pace`, a woken pass starts at least `pace`
        after the last one started (never later than its timer): the wakes in between
        make that one pass."""
        failures = 0
        while not self.stop.is_set():
            started = time.monotonic()
            after = self.run_pass(reconcile)
            if after is None:
                failures += 1
                after = self.retry.delay(failures)
            else:
                failures = 0
            if after > 0:
                due = time.monotonic() + after
                if self.woken.wait(after) and self.pace > 0:
                    self._paced(min(due, started + self.pace))

    def _paced(self, until: float) -> None:
        """Wait (for the stop only) until `until`, then take the wakes that came
        meanwhile: the pass about to start reads what each of them followed."""
        rest = until - time.monotonic()
        if rest > 0:
            self.stop.wait(rest)
        self.woken.take()


@dataclass(frozen=True)
class Stream:
    """Events of a kind, handed over by `via` (kopf's watch of a custom resource, or a
    list+watch of our own)."""

    kind: str
    via: str


@dataclass(frozen=True)
class ListWatch:
    """A kind listed once, then watched from the last resourceVersion by the loop."""

    kind: str


@dataclass(frozen=True)
class Channel:
    """A PostgreSQL NOTIFY channel the loop LISTENs on."""

    name: str


@dataclass(frozen=True)
class Timer:
    """The loop's own clock: at most `seconds` between passes (`what` says when sooner)."""

    seconds: float
    what: str = ""


@dataclass(frozen=True)
class Requeue:
    """Keys other parts put on the controller's queue (`by`, and why), to be read
    afresh: a change that has no event of the key's own."""

    by: str


@dataclass(frozen=True)
class On(Generic[S]):
    """Woken when `signal` is emitted; `part`: only that part of the loop (a pass)."""

    signal: S
    part: str | None = None

    def target(self, controller: str) -> str:
        return controller if self.part is None else f"{controller}.{self.part}"


Source = Stream | ListWatch | Channel | Timer | Requeue | On[S]


@dataclass(frozen=True)
class Controller(Generic[C, S]):
    """One controller: its sources, the queue it drains, its reconcile (named, for the
    table), `run`, the loop each of its threads runs (with the `LoopHandle` the manager
    builds for it), and `retry`, the backoff of a failed pass (`LoopHandle.drive`; None
    for a workqueue's controller, whose queue retries a failed key with its own backoff,
    runtime/workqueue.py)."""

    name: str
    sources: tuple[Source[S], ...]
    queue: str
    reconcile: str
    run: Callable[[C, LoopHandle], None]
    threads: int = 1
    # A watch stream wakes only at its next event and holds nothing between events:
    # not waited for at shutdown.
    joined: bool = True
    retry: Backoff | None = LOOP_RETRY
    # The least seconds between the starts of two passes when a wake asks for the second
    # (`LoopHandle.drive`); 0: at once.
    pace: float = 0.0

    def thread_names(self) -> list[str]:
        if self.threads == 1:
            return [self.name]
        return [f"{self.name}-{i}" for i in range(self.threads)]


def _bound(run: Callable[[C, LoopHandle], None], handle: LoopHandle) -> Callable[[C], None]:
    def loop(context: C) -> None:
        run(context, handle)

    return loop


class Manager(Generic[C, S]):
    """The controllers of one process: routes their `On` sources into `wakes`, builds
    each one's `LoopHandle` (`handles`), then runs its loop on its threads
    (runtime/loops.py)."""

    def __init__(
        self,
        controllers: Sequence[Controller[C, S]],
        context: C,
        wakes: Wakes[S],
        stop: threading.Event,
        passes: Passes,
    ) -> None:
        self.controllers = tuple(controllers)
        self.handles: dict[str, LoopHandle] = {}
        for controller in self.controllers:
            woken = wakes.target(controller.name)  # its loop may wait on it, routed or not
            for source in controller.sources:
                if isinstance(source, On):
                    wakes.route(source.signal, source.target(controller.name))
            retry = controller.retry or LOOP_RETRY  # unused by a workqueue's threads
            self.handles[controller.name] = LoopHandle(
                controller.name, stop, woken, passes, retry, controller.pace
            )
        loops: dict[str, Callable[[C], None]] = {}
        unjoined: set[str] = set()
        for controller in self.controllers:
            handle = self.handles[controller.name]
            for name in controller.thread_names():
                loops[name] = _bound(controller.run, handle)
                if not controller.joined:
                    unjoined.add(name)
        self.loops = Loops(
            context, loops, stop=stop, wakes=wakes.all(), unjoined=frozenset(unjoined)
        )

    def start(self) -> None:
        self.loops.start()

    def shutdown(self, within: float) -> None:
        self.loops.shutdown(within)
