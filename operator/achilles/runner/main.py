"""One run, as a process: what the run's Job executes (`achilles runner --run-id N`).

Threads: the main thread waits for the first of four events; the agent loop
runs on a worker thread; the heartbeat beats on its own thread and connection.

- loop finished  -> it already wrote `succeeded` or `failed` (or saw its row
  taken away); exit 0.
- SIGTERM/SIGINT -> stop at once and write `failed/error` ("terminated"), so the
  runner never leaves its row `running`; exit 0. A model call in flight is
  abandoned (its tokens, unknown, are not counted).
- deadline (`agent_run_timeout_seconds` from the Job's creation: Kubernetes' SIGTERM at the
  Job's activeDeadlineSeconds, or the runner's own a little later) -> `failed/error`
  naming the limit; exit 0.
- heartbeat refused (the reaper failed the row as stale) -> stop, write nothing; exit 0.
- the loop or the setup raised (a bug) -> `failed/error` with the exception; exit 1.

A database gone away from the claim to the model call is waited for (`runner/reach.py`:
0.5 s doubling to 5 s, the pod's deadline bounding it), and so is the write that ends the
run: the runner records its end once the database is back, the heartbeat beating
meanwhile, instead of exiting with its row `running` for the reaper to fail as stale.

Exit codes: 0 whenever the runner behaved as designed - it wrote the run's
terminal state, or the row was not claimable (already claimed, finished,
deleted), or the row was taken away from it. Non-zero only for crashes. The
journal row, not the pod's exit code, is the truth about the run.

All journal writes are guarded by state, so the main thread and the loop thread
may race to finish the row: the first write wins and the other is refused.

The claim is the run's first heartbeat (it writes `started_at` and `heartbeat_at`), and
the time from a pod's start to it is mostly this interpreter's imports. So this module
imports only what the claim needs, psycopg (`achilles.db.run_claim`: one SQL function on
a connection of its own); the journal's stack (SQLAlchemy: `runner/claimed.py`) comes
after the claim, and the agent loop's (openai, the tools: `runner/execution.py`) after
the heartbeat started. `tests/db/test_runner_imports.py` keeps it so.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from types import FrameType

from achilles.db.driver_errors import CONNECT_TIMEOUT_SECONDS
from achilles.db.run_claim import HeartbeatAlone, claim_run_alone, runner_conninfo
from achilles.domain.run_secret import session_settings
from achilles.runner.config import RunnerConfig
from achilles.runner.events import EXIT_OK, Event, RowLost, Terminated
from achilles.runner.heartbeat import Heartbeat
from achilles.runner.startup import permanent_imports

log = logging.getLogger(__name__)

APPLICATION_NAME = "achilles-runner"


def run(config: RunnerConfig) -> int:
    events: queue.SimpleQueue[Event] = queue.SimpleQueue()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        # SimpleQueue.put is reentrant: safe inside a signal handler.
        events.put(Terminated(signal.Signals(signum).name))

    # Installed before the claim, so a pod told to stop at any moment never
    # leaves a row `running` behind it.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    run_id = config.run_id
    if not events.empty():
        log.info("terminated before claiming run %d; it stays queued", config.run_id)
        return EXIT_OK
    # The run's secret rides on the connection (session settings), so the runner login's
    # policies show this run's row and no other (0011_least_privilege).
    settings = session_settings(config.run_id, config.run_secret) if config.run_secret else None
    conninfo = runner_conninfo(
        config.database_url,
        session_settings=settings,
        application_name=APPLICATION_NAME,
        connect_timeout=CONNECT_TIMEOUT_SECONDS,  # as `Database`'s
    )
    if not claim_run_alone(conninfo, run_id):
        log.info("run %d is not queued (claimed, finished or deleted); nothing to do", run_id)
        return EXIT_OK
    claimed_at = time.monotonic()
    log.info("run %d claimed", config.run_id)
    # The claim was the first beat; the next ones come from here, before the journal's
    # stack is imported (on a starved node that import alone outlasted the threshold).
    # `stop` ends the agent loop; the heartbeat beats until this process's work is done,
    # a write that ends the run and waits for the database included (`runner/reach.py`).
    stop = threading.Event()
    done = threading.Event()
    Heartbeat(
        beat=HeartbeatAlone(conninfo, run_id).beat,
        interval=config.heartbeat_interval,
        on_row_lost=lambda: events.put(RowLost()),
        stop=done,
    ).start()
    try:
        # From here on the row is `running`: `carry_claimed_run` ends it whatever happens.
        with permanent_imports():
            from achilles.runner.claimed import carry_claimed_run

        return carry_claimed_run(config, settings, events, claimed_at, stop)
    finally:
        stop.set()
        done.set()
