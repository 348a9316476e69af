"""A level-triggered wake-up: set by anyone, cleared by the loop that waits on it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class Wake:
    """A level-triggered wake-up: set by anyone, cleared by the loop that waits on it."""

    event: threading.Event = field(default_factory=threading.Event)

    def set(self) -> None:
        self.event.set()

    def wait(self, timeout: float) -> None:
        self.event.wait(timeout)
        self.event.clear()

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
