"""The run's heartbeat: `heartbeat_at` every interval, on its own thread and connection.

Beats must not wait behind a slow model call or tool, so they have a thread and
a database connection pool of their own. A refused beat means the row is no
longer `running` (the reaper failed it as stale, or it finished): the beater
reports that once and stops. A database error is logged and retried at the next
beat; if the database stays away long enough, the reaper will decide.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(
        self,
        *,
        beat: Callable[[], bool],
        interval: float,
        on_row_lost: Callable[[], None],
        stop: threading.Event,
    ) -> None:
        if interval <= 0:
            raise ValueError("heartbeat interval must be positive")
        self._beat = beat
        self._interval = interval
        self._on_row_lost = on_row_lost
        self._stop = stop
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                alive = self._beat()
            except Exception:  # a beat must never kill the beater
                log.warning("heartbeat failed; retrying at the next beat", exc_info=True)
                continue
            if not alive:
                log.warning("heartbeat refused: the run is no longer running")
                self._on_row_lost()
                return
