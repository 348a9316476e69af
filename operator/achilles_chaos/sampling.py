"""A scenario's background sampler: a daemon thread that looks at the journal at a steady
pace while faults are injected, until the scenario stops it."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from achilles_chaos.scenario import Context


class Sampler:
    """Subclasses say what one look is (`_run`, pacing itself with `_ticks`)."""

    def __init__(self, ctx: Context, *, name: str, every: float) -> None:
        self.ctx = ctx
        self.samples = 0
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _ticks(self) -> Iterator[None]:
        """One tick every `every` seconds until `stop`."""
        while not self._stop.wait(self._every):
            yield

    def _run(self) -> None:
        raise NotImplementedError
