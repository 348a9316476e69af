"""Named loop threads, started and stopped together, and each loop's passes.

A loop is a function of a stop event's holder that runs until it is set; `Loops` starts
one daemon thread per loop and, at shutdown, sets the stop, sets the wakes the loops
sleep on, and waits for them within a deadline. `Passes` runs one pass of a loop: an
error ends the pass, never the loop; each pass is timed and counted through the
callbacks it is given, and the seconds since each loop's last pass are the liveness
probe's (`health`). An error its `expected` names (a dependency away, as the database
restarting) is logged as one warning line; any other with its traceback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, Protocol, TypeVar

log = logging.getLogger("achilles.operator")

T = TypeVar("T")
C = TypeVar("C")


class PassObserver(Protocol):
    def passed(self, loop: str, seconds: float) -> None:
        """A pass of `loop` ended after `seconds` (failed or not)."""

    def failed(self, loop: str) -> None:
        """A pass of `loop` raised."""


def _unexpected(error: Exception) -> str | None:
    return None


class Passes:
    def __init__(
        self, observer: PassObserver, *, expected: Callable[[Exception], str | None] = _unexpected
    ) -> None:
        """`expected`: what an error the loops expect and outlive says (one line), or
        None for any other. The runtime knows no dependency, so its user names them (the
        operator: the database unreachable, handlers/context.py)."""
        self._observer = observer
        self._expected = expected
        self.last_pass: dict[str, float] = {}

    def run(self, loop: str, work: Callable[[], T]) -> T | None:
        """One pass of a loop: its result, or None when it raised (logged and counted).
        An error ends the pass, never the loop."""
        return self.attempt(loop, work)[1]

    def attempt(self, loop: str, work: Callable[[], T]) -> tuple[bool, T | None]:
        """One pass of a loop: whether it completed, and its result (None when it
        raised: logged and counted). An error ends the pass, never the loop."""
        started = time.monotonic()
        try:
            result = work()
        except Exception as exc:
            self._observer.failed(loop)
            self._log_failure(loop, exc)
            return False, None
        finally:
            self._observer.passed(loop, time.monotonic() - started)
        self.last_pass[loop] = time.monotonic()
        return True, result

    def _log_failure(self, loop: str, error: Exception) -> None:
        # An outage is expected and outlived: its traceback, at every retry while it
        # lasts, would only bury what it says (and an unexpected error's traceback).
        said = self._expected(error)
        if said is None:
            log.error("%s pass failed", loop, exc_info=error)
        else:
            log.warning("%s pass failed: %s; tried again after its backoff", loop, said)

    def health(self) -> dict[str, float]:
        """Seconds since each loop last completed a pass."""
        now = time.monotonic()
        return {loop: round(now - at, 1) for loop, at in self.last_pass.items()}


class Waker(Protocol):
    def set(self) -> None: ...


class Loops(Generic[C]):
    """One daemon thread per loop (`achilles-<name>`), each called with `context`."""

    def __init__(
        self,
        context: C,
        loops: Mapping[str, Callable[[C], None]],
        *,
        stop: threading.Event,
        wakes: Iterable[Waker] = (),
        unjoined: frozenset[str] = frozenset(),
    ) -> None:
        self.context = context
        self._loops = dict(loops)
        self._stop = stop
        self._wakes = tuple(wakes)
        self._unjoined = unjoined
        self.threads: dict[str, threading.Thread] = {}

    def start(self) -> None:
        for name, loop in self._loops.items():
            thread = threading.Thread(
                target=loop, args=(self.context,), name=f"achilles-{name}", daemon=True
            )
            thread.start()
            self.threads[name] = thread

    def shutdown(self, within: float) -> None:
        """Let the loops finish the pass they are in, within `within` seconds in all; the
        threads are daemons and end with the process. The unjoined ones are not waited
        for (a watch stream wakes only at its next event)."""
        self._stop.set()
        for wake in self._wakes:
            wake.set()
        deadline = time.monotonic() + within
        for name, thread in self.threads.items():
            if name not in self._unjoined:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
