"""A manager that declares its controllers, as controller-runtime's does
(`ctrl.NewControllerManagedBy(mgr).For(...).Watches(...).Complete(r)`).

Each `Controller` is registered with its sources (what makes it run: a stream of objects,
a list+watch, a NOTIFY channel, a timer, keys another part requeues, a signal of another
part), the queue it drains and the loop that reconciles it. The `On` sources are the
only wiring: the manager routes each signal to the controller's wake (`Wakes`), so who
wakes whom is the table, not a set of calls spread over the modules. The others say what
else drives the loop (its own timer, a watch it holds, a requeue) and are there to be
read: the table is the operator's whole shape. A loop converted to its own dependencies
takes a reconciler holding exactly what it uses and a `LoopHandle` (its stop, wake and
passes), both built where the table declares it, instead of the process's whole context.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from achilles.runtime.loops import Loops, Passes
from achilles.runtime.wake import Wake, Wakes

C = TypeVar("C")
S = TypeVar("S", bound=Hashable)
T = TypeVar("T")


@dataclass(frozen=True)
class LoopHandle:
    """What a loop holds of the manager that runs it: the process's stop, its own wake
    (`woken`, routed by the table's `On` sources) and its passes, counted under `name`.
    Beside it the loop takes its reconciler, built with exactly the handles it uses, as
    controller-runtime's reconciler struct holds its clients while the controller drives
    it."""

    name: str
    stop: threading.Event
    woken: Wake
    passes: Passes

    def run_pass(self, work: Callable[[], T]) -> T | None:
        """One pass (`Passes.run`): its result, or None when it raised."""
        return self.passes.run(self.name, work)


@dataclass(frozen=True)
class Stream:
    """Events of a kind, handed over by `via` (kopf's watch of a custom resource)."""

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
    table) and `run`, the loop each of its threads runs."""

    name: str
    sources: tuple[Source[S], ...]
    queue: str
    reconcile: str
    run: Callable[[C], None]
    threads: int = 1
    # A watch stream wakes only at its next event and holds nothing between events:
    # not waited for at shutdown.
    joined: bool = True

    def thread_names(self) -> list[str]:
        if self.threads == 1:
            return [self.name]
        return [f"{self.name}-{i}" for i in range(self.threads)]


class Manager(Generic[C, S]):
    """The controllers of one process: routes their `On` sources into `wakes`, then
    runs each one's loop on its threads (runtime/loops.py)."""

    def __init__(
        self,
        controllers: Sequence[Controller[C, S]],
        context: C,
        wakes: Wakes[S],
        stop: threading.Event,
    ) -> None:
        self.controllers = tuple(controllers)
        for controller in self.controllers:
            wakes.target(controller.name)  # its loop may wait on it, routed or not
            for source in controller.sources:
                if isinstance(source, On):
                    wakes.route(source.signal, source.target(controller.name))
        loops: dict[str, Callable[[C], None]] = {}
        unjoined: set[str] = set()
        for controller in self.controllers:
            for name in controller.thread_names():
                loops[name] = controller.run
                if not controller.joined:
                    unjoined.add(name)
        self.loops = Loops(
            context, loops, stop=stop, wakes=wakes.all(), unjoined=frozenset(unjoined)
        )

    def start(self) -> None:
        self.loops.start()

    def shutdown(self, within: float) -> None:
        self.loops.shutdown(within)
