"""Level-triggered wake-ups (`Wake`), and who wakes whom (`Wakes`)."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

S = TypeVar("S", bound=Hashable)


@dataclass
class Wake:
    """A level-triggered wake-up: set by anyone, cleared by the loop that waits on it."""

    event: threading.Event = field(default_factory=threading.Event)

    def set(self) -> None:
        self.event.set()

    def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for a set; whether it was set (the wake cleared)."""
        woken = self.event.wait(timeout)
        self.event.clear()
        return woken

    def take(self) -> bool:
        """Whether it was set, clearing it: for a loop that looks at the wake on its own
        tick (the sweeper) instead of waiting on it. Taken just before the work it asks
        for: a set during the work is kept for the next look, and one cleared unseen
        (set between the look and the clear) came from a commit before the work began,
        which the work then reads."""
        if not self.event.is_set():
            return False
        self.event.clear()
        return True


class Wakes(Generic[S]):
    """Who wakes whom, in one place: each target (a loop, or a part of one) has one
    `Wake`; each signal (something that happened) wakes the targets routed to it. The
    routes are set once, before the loops start (the manager's declarations); whoever
    sees something happen emits it and knows nothing of who listens."""

    def __init__(self) -> None:
        self._targets: dict[str, Wake] = {}
        self._routes: dict[S, list[str]] = {}

    def target(self, name: str) -> Wake:
        """The wake of `name` (made on first use)."""
        return self._targets.setdefault(name, Wake())

    def route(self, signal: S, target: str) -> None:
        targets = self._routes.setdefault(signal, [])
        if target not in targets:
            targets.append(target)
        self.target(target)

    def routes(self) -> dict[S, tuple[str, ...]]:
        return {signal: tuple(targets) for signal, targets in self._routes.items()}

    def emit(self, signal: S) -> None:
        for target in self._routes.get(signal, ()):
            self._targets[target].set()

    def all(self) -> tuple[Wake, ...]:
        """Every target's wake (shutdown sets them all, so each loop sees the stop)."""
        return tuple(self._targets.values())
