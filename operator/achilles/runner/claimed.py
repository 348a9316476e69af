"""A claimed run, from its spec to its end: the runner's part after the claim.

Imported by the process (`runner/main.py`) once its claim, the run's first heartbeat,
is written: this is where the journal's stack (SQLAlchemy) comes in. The row is
`running` from here on, so every way out ends it: refused (no model, a login too
powerful, a bad time zone), or carried by the agent loop (`runner/execution.py`), or
failed with the crash that stopped it.

The heartbeat beats from just after the claim (`runner/main.py`, psycopg alone): a
database that goes away right after the claim is waited for (`_when_reachable`), as a
run whose database goes away mid-call waits, and the reaper judges both by the same rule
(issue 20's claim before the agent loop's imports made this window; `achilles chaos
postgres-outage` stops PostgreSQL in it).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from achilles.db.database import Database
from achilles.db.roles import Component
from achilles.domain.run_spec import RunSpec
from achilles.domain.runs import FailReason
from achilles.domain.timezones import load_timezone
from achilles.errors import ConfigurationError, DatabaseUnavailable, UnknownTimezoneError
from achilles.runner.config import API_KEY_ENV, RunnerConfig
from achilles.runner.events import EXIT_CRASH, EXIT_OK, Event
from achilles.runner.startup import permanent_imports
from achilles.services import db_roles
from achilles.services.run_journal import RunJournal

log = logging.getLogger(__name__)

T = TypeVar("T")
# A database unreachable after the claim is tried again this often, doubling.
REACH_FIRST_SECONDS = 0.5
REACH_MOST_SECONDS = 5.0


def carry_claimed_run(
    config: RunnerConfig,
    session_settings: Mapping[str, str] | None,
    events: queue.SimpleQueue[Event],
    claimed: float,
    stop: threading.Event,
) -> int:
    """Run `config.run_id`, claimed at `claimed` (monotonic), to its end; the exit code
    (`stop`: set when the agent loop ends, and by the caller at the end)."""
    # One pool for the rest of the process, each connection with the run's secret
    # (session settings), as the claim's.
    database = RunJournal(
        Database(
            config.database_url,
            pool_size=2,
            application_name="achilles-runner",
            session_settings=session_settings,
        )
    )
    try:
        try:
            spec = _when_reachable("reading the run", lambda: database.load(config.run_id))
            if spec is None:
                log.info("run %d is gone (deleted with its agent); nothing to do", config.run_id)
                return EXIT_OK
            log.info("run %d: agent %d (%s)", spec.run_id, spec.agent_id, spec.agent_name)
            powerful = _when_reachable(
                "checking the login", lambda: _powerful_login(database, config)
            )
            if powerful is not None:
                log.error("run %d: %s", spec.run_id, powerful)
                database.fail(spec.run_id, FailReason.ERROR, powerful)
                return EXIT_OK
            return _start(spec, config, database, events, claimed, stop)
        except Exception as exc:
            # A bug or a lost database after the claim: never leave the row `running`.
            log.exception("run %d: the runner crashed", config.run_id)
            database.fail(
                config.run_id,
                FailReason.ERROR,
                f"runner crashed: {type(exc).__name__}: {exc} (traceback in the pod log)",
            )
            return EXIT_CRASH
    finally:
        database.database.dispose()


def _when_reachable(what: str, call: Callable[[], T]) -> T:
    """`call`, tried again while the database is unreachable (the pod's deadline bounds
    the wait; the heartbeat thread keeps trying too)."""
    delay = REACH_FIRST_SECONDS
    while True:
        try:
            return call()
        except DatabaseUnavailable as exc:
            log.warning("%s: %s; trying again in %.1f s", what, exc, delay)
        time.sleep(delay)  # a backoff between attempts, not a wait for another thread
        delay = min(2 * delay, REACH_MOST_SECONDS)


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
    stop: threading.Event,
) -> int:
    """The claimed run (at `claimed`, monotonic): refused, or its agent loop run (`stop`
    ends the heartbeat)."""
    refusal = _refusal(spec, config)
    if refusal is not None or spec.model is None:
        database.fail(spec.run_id, FailReason.ERROR, refusal or "no model")
        return EXIT_OK
    # Here, not at the top: the agent loop's stack (openai alone is most of a second of
    # CPU) would otherwise delay the heartbeat.
    with permanent_imports():
        from achilles.runner.execution import execute

    return execute(
        spec, config, database, events, model_endpoint=spec.model, claimed=claimed, stop=stop
    )
