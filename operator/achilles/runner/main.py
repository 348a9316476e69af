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
- the loop or the setup raised (a bug, the database gone) -> `failed/error` with the
  exception if the database lets us; exit 1.

Exit codes: 0 whenever the runner behaved as designed - it wrote the run's
terminal state, or the row was not claimable (already claimed, finished,
deleted), or the row was taken away from it. Non-zero only for crashes. The
journal row, not the pod's exit code, is the truth about the run.

All journal writes are guarded by state, so the main thread and the loop thread
may race to finish the row: the first write wins and the other is refused.

The claim is the run's first heartbeat (it writes `started_at` and `heartbeat_at`), and
the time from a pod's start to it is mostly this interpreter's imports. So this module
imports only what the claim needs (the database stack); the agent loop's stack (openai,
the tools: `runner/execution.py`) is imported after the claim, while the heartbeat
thread already beats. `tests/db/test_runner_imports.py` keeps it so.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from types import FrameType

from achilles.db.database import Database
from achilles.db.roles import Component
from achilles.domain.run_secret import session_settings
from achilles.domain.run_spec import RunSpec
from achilles.domain.runs import FailReason
from achilles.domain.timezones import load_timezone
from achilles.errors import ConfigurationError, UnknownTimezoneError
from achilles.runner.config import API_KEY_ENV, RunnerConfig
from achilles.runner.events import EXIT_CRASH, EXIT_OK, Event, RowLost, Terminated
from achilles.runner.heartbeat import Heartbeat
from achilles.runner.startup import permanent_imports
from achilles.services import db_roles
from achilles.services.run_journal import RunJournal

log = logging.getLogger(__name__)


def run(config: RunnerConfig) -> int:
    events: queue.SimpleQueue[Event] = queue.SimpleQueue()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        # SimpleQueue.put is reentrant: safe inside a signal handler.
        events.put(Terminated(signal.Signals(signum).name))

    # Installed before the claim, so a pod told to stop at any moment never
    # leaves a row `running` behind it.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    # One pool for the process: the loop's transactions and the heartbeat thread's.
    # The run's secret rides on every connection (session settings), so the runner
    # login's policies show this run's rows and no others (0011_least_privilege).
    settings = session_settings(config.run_id, config.run_secret) if config.run_secret else None
    database = RunJournal(
        Database(
            config.database_url,
            pool_size=2,
            application_name="achilles-runner",
            session_settings=settings,
        )
    )
    try:
        if not events.empty():
            log.info("terminated before claiming run %d; it stays queued", config.run_id)
            return EXIT_OK
        powerful = _powerful_login(database, config)
        spec = database.claim(config.run_id)
        if spec is not None and powerful is not None:
            log.error("run %d: %s", spec.run_id, powerful)
            database.fail(spec.run_id, FailReason.ERROR, powerful)
            return EXIT_OK
        if spec is None:
            log.info(
                "run %d is not queued (claimed, finished or deleted); nothing to do", config.run_id
            )
            return EXIT_OK
        claimed = time.monotonic()
        log.info("run %d claimed: agent %d (%s)", spec.run_id, spec.agent_id, spec.agent_name)
        try:
            return _start(spec, config, database, events, claimed)
        except Exception as exc:
            # A bug or a lost database after the claim: never leave the row `running`.
            log.exception("run %d: the runner crashed", spec.run_id)
            database.fail(
                spec.run_id,
                FailReason.ERROR,
                f"runner crashed: {type(exc).__name__}: {exc} (traceback in the pod log)",
            )
            return EXIT_CRASH
    finally:
        database.database.dispose()


def _powerful_login(database: RunJournal, config: RunnerConfig) -> str | None:
    """Why this runner must not run its agent: its login is more than a runner's (a
    superuser, BYPASSRLS, the tables' owner), so a tool could read every owner's data.
    The login can then end the run itself, saying so."""
    try:
        db_roles.refuse_powerful_login(
            database.database, Component.RUNNER, allow=config.allow_superuser
        )
    except ConfigurationError as exc:
        return str(exc)
    return None


def _refusal(spec: RunSpec, config: RunnerConfig) -> str | None:
    """Why this run cannot start at all, if it cannot."""
    if spec.model is None:
        return "the agent has no model (it was never chosen or was withdrawn); nothing ran"
    if spec.model.has_api_key and not config.api_key:
        return (
            f"{API_KEY_ENV} is not set, but model {spec.model.name!r} needs an API key "
            "(check the AgentModel's apiKeySecretRef and the Job's environment)"
        )
    try:
        load_timezone(spec.owner_timezone)
    except UnknownTimezoneError:
        return f"the owner's timezone {spec.owner_timezone!r} is not a known IANA time zone"
    return None


def _start(
    spec: RunSpec,
    config: RunnerConfig,
    database: RunJournal,
    events: queue.SimpleQueue[Event],
    claimed: float,
) -> int:
    """The claimed run (at `claimed`, monotonic): refused, or its heartbeat started and
    its agent loop run."""
    refusal = _refusal(spec, config)
    if refusal is not None or spec.model is None:
        database.fail(spec.run_id, FailReason.ERROR, refusal or "no model")
        return EXIT_OK

    stop = threading.Event()
    Heartbeat(
        beat=lambda: database.heartbeat(spec.run_id),
        interval=config.heartbeat_interval,
        on_row_lost=lambda: events.put(RowLost()),
        stop=stop,
    ).start()
    try:
        # Here, not at the top: the agent loop's stack (openai alone is most of a
        # second of CPU) would otherwise delay the claim, the run's first heartbeat.
        with permanent_imports():
            from achilles.runner.execution import execute

        return execute(
            spec, config, database, events, model_endpoint=spec.model, claimed=claimed, stop=stop
        )
    finally:
        stop.set()
