"""A claimed run, from its spec to its end: the runner's part after the claim.

Imported by the process (`runner/main.py`) once its claim, the run's first heartbeat,
is written: this is where the journal's stack (SQLAlchemy) comes in. The row is
`running` from here on, so every way out ends it: refused (no model, a login too
powerful, a bad time zone), or carried by the agent loop (`runner/execution.py`), or
failed with the crash that stopped it.

The heartbeat beats from just after the claim (`runner/main.py`, psycopg alone): a
database that goes away right after the claim is waited for (`runner/reach.py`), up to
the model call (`runner/execution.py`), as a run whose database goes away mid-call waits,
and the reaper judges both by the same rule (issue 20's claim before the agent loop's
imports made this window; `achilles chaos postgres-outage` stops PostgreSQL in it). The
write that ends the run waits for it too: a runner never exits leaving its row `running`
because the database was away when it ended.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping

from achilles.db.database import Database
from achilles.db.roles import Component
from achilles.domain.run_spec import RunSpec
from achilles.domain.runs import FailReason
from achilles.domain.timezones import load_timezone
from achilles.errors import ConfigurationError, UnknownTimezoneError
from achilles.runner.config import API_KEY_ENV, RunnerConfig
from achilles.runner.events import EXIT_CRASH, EXIT_OK, Event
from achilles.runner.reach import when_reachable
from achilles.runner.startup import permanent_imports
from achilles.services import db_roles
from achilles.services.run_journal import RunJournal

log = logging.getLogger(__name__)


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
            spec = when_reachable("reading the run", lambda: database.load(config.run_id))
            if spec is None:
                log.info("run %d is gone (deleted with its agent); nothing to do", config.run_id)
                return EXIT_OK
            log.info("run %d: agent %d (%s)", spec.run_id, spec.agent_id, spec.agent_name)
            powerful = when_reachable(
                "checking the login", lambda: _powerful_login(database, config)
            )
            if powerful is not None:
                log.error("run %d: %s", spec.run_id, powerful)
                record_fail(database, spec.run_id, powerful)
                return EXIT_OK
            return _start(spec, config, database, events, claimed, stop)
        except Exception as exc:
            # A bug or a lost database after the claim: never leave the row `running`.
            log.exception("run %d: the runner crashed", config.run_id)
            record_fail(
                database,
                config.run_id,
                f"runner crashed: {type(exc).__name__}: {exc} (traceback in the pod log)",
            )
            return EXIT_CRASH
    finally:
        database.database.dispose()


def record_fail(database: RunJournal, run_id: int, error: str) -> bool:
    """The run failed with `error`, written once the database answers (the heartbeat
    beats meanwhile: `runner/main.py` stops it after this). The write is guarded by the
    row's state, so a try again after an ambiguous failure (the commit may have landed)
    is refused, not doubled: False means the row had already left `running` (this end
    recorded by the try before, or another end first), which is no error."""
    written = when_reachable(
        f"recording run {run_id}'s end", lambda: database.fail(run_id, FailReason.ERROR, error)
    )
    if not written:
        log.info("run %d: already ended (its end recorded before); nothing more to write", run_id)
    return written


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
        record_fail(database, spec.run_id, refusal or "no model")
        return EXIT_OK
    # Here, not at the top: the agent loop's stack (openai alone is most of a second of
    # CPU) would otherwise delay the heartbeat.
    with permanent_imports():
        from achilles.runner.execution import execute

    return execute(
        spec, config, database, events, model_endpoint=spec.model, claimed=claimed, stop=stop
    )
