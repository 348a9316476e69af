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
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType

from achilles.db.database import Database
from achilles.db.roles import Component
from achilles.domain.run_secret import session_settings
from achilles.domain.run_spec import RunSpec
from achilles.domain.runs import FailReason
from achilles.domain.schedule.timezones import load_timezone
from achilles.errors import ConfigurationError, UnknownTimezoneError
from achilles.llm.chat import OpenAIChatModel
from achilles.runner.config import API_KEY_ENV, RunnerConfig
from achilles.runner.heartbeat import Heartbeat
from achilles.runner.loop import AgentLoop, LoopLimits, LoopResult, timed_out_message
from achilles.runner.prompt import compose_messages
from achilles.services import db_roles
from achilles.services.run_journal import RunJournal
from achilles.tools.base import ToolContext
from achilles.tools.catalogue import select_tools

log = logging.getLogger(__name__)

# What the openai client gets for models without an API key Secret (keyless local servers).
NO_API_KEY = "no-key"

EXIT_OK = 0
EXIT_CRASH = 1
# The runner's own deadline comes this long after its Job's activeDeadlineSeconds.
OWN_DEADLINE_GRACE = 10.0
# A SIGTERM this close to the Job's deadline is the deadline's (the database's and this
# host's clocks, and the Job controller's reaction, are not exact).
DEADLINE_SLACK = 2.0


# --- what the main thread waits for ---


@dataclass(frozen=True)
class _LoopFinished:
    result: LoopResult


@dataclass(frozen=True)
class _LoopCrashed:
    error: str


@dataclass(frozen=True)
class _Terminated:
    signal_name: str


@dataclass(frozen=True)
class _RowLost:
    pass


_Event = _LoopFinished | _LoopCrashed | _Terminated | _RowLost


class _Journal:
    """`RunJournal` for one run id."""

    def __init__(self, database: RunJournal, run_id: int) -> None:
        self._db = database
        self._run_id = run_id

    def add_tokens(self, tokens: int) -> bool:
        return self._db.add_tokens(self._run_id, tokens)

    def succeed(self, output: str) -> bool:
        return self._db.succeed(self._run_id, output)

    def fail(self, reason: FailReason, error: str) -> bool:
        return self._db.fail(self._run_id, reason, error)


def run(config: RunnerConfig) -> int:
    events: queue.SimpleQueue[_Event] = queue.SimpleQueue()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        # SimpleQueue.put is reentrant: safe inside a signal handler.
        events.put(_Terminated(signal.Signals(signum).name))

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
            _Journal(database, spec.run_id).fail(FailReason.ERROR, powerful)
            return EXIT_OK
        if spec is None:
            log.info(
                "run %d is not queued (claimed, finished or deleted); nothing to do", config.run_id
            )
            return EXIT_OK
        log.info("run %d claimed: agent %d (%s)", spec.run_id, spec.agent_id, spec.agent_name)
        try:
            return _execute(spec, config, database, events)
        except Exception as exc:
            # A bug or a lost database after the claim: never leave the row `running`.
            log.exception("run %d: the runner crashed", spec.run_id)
            _Journal(database, spec.run_id).fail(
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


def _execute(
    spec: RunSpec, config: RunnerConfig, database: RunJournal, events: queue.SimpleQueue[_Event]
) -> int:
    journal = _Journal(database, spec.run_id)
    refusal = _refusal(spec, config)
    if refusal is not None or spec.model is None:
        journal.fail(FailReason.ERROR, refusal or "no model")
        return EXIT_OK

    stop = threading.Event()
    # In a Job, the run's limit counts from the Job's start, as its activeDeadlineSeconds
    # does, not from this claim: the pod's start-up has already used part of it.
    # Kubernetes enforces it (SIGTERM, then SIGKILL: even a runner that hangs is
    # stopped); the runner's own deadline, a little later, is the backstop should it not.
    # Without a Job (a runner started by hand) the runner's deadline is the only one.
    claimed = time.monotonic()
    job_deadline: float | None = None
    deadline = claimed + spec.run_timeout_seconds
    if spec.seconds_since_dispatch is not None:
        job_deadline = claimed + spec.run_timeout_seconds - spec.seconds_since_dispatch
        deadline = job_deadline + OWN_DEADLINE_GRACE

    Heartbeat(
        beat=lambda: database.heartbeat(spec.run_id),
        interval=config.heartbeat_interval,
        on_row_lost=lambda: events.put(_RowLost()),
        stop=stop,
    ).start()

    selection = select_tools(spec.tool_implementations)
    if selection.unknown:
        log.warning("skipping tools unknown to this runner: %s", ", ".join(selection.unknown))
    model = OpenAIChatModel(
        base_url=spec.model.base_url,
        api_key=config.api_key or NO_API_KEY,
        model=spec.model.provider_model,
        timeout=config.model_timeout,
        max_retries=config.model_max_retries,
    )
    tool_context = ToolContext(
        run_id=spec.run_id,
        agent_id=spec.agent_id,
        owner_user_id=spec.owner_user_id,
        owner_timezone=load_timezone(spec.owner_timezone),
        knowledge=database.knowledge_store(),
        transaction=database.database.transaction,
        now=lambda: datetime.now(UTC),
    )
    loop = AgentLoop(
        model=model,
        toolbox=selection.toolbox,
        tool_context=tool_context,
        journal=journal,
        limits=LoopLimits(
            max_iterations=spec.max_iterations,
            run_timeout_seconds=spec.run_timeout_seconds,
            deadline=deadline,
            request_timeout=config.model_timeout,
        ),
        stop=stop,
    )
    notes = [note for hook in selection.run_start_notes if (note := hook(tool_context))]
    messages = compose_messages(spec, datetime.now(UTC), notes)
    log.info("offering tools: %s", ", ".join(selection.toolbox.names))

    def work() -> None:
        try:
            events.put(_LoopFinished(loop.run(messages)))
        except Exception as exc:
            log.exception("the agent loop crashed")
            events.put(_LoopCrashed(f"{type(exc).__name__}: {exc}"))

    threading.Thread(target=work, name="agent-loop", daemon=True).start()
    try:
        event: _Event | None = events.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        event = None
    stop.set()
    at_deadline = job_deadline is not None and time.monotonic() >= job_deadline - DEADLINE_SLACK
    return _conclude(event, journal, spec, at_deadline=at_deadline)


def _conclude(event: _Event | None, journal: _Journal, spec: RunSpec, *, at_deadline: bool) -> int:
    match event:
        case _LoopFinished(result):
            log.info(
                "run %d: %s (%s) after %d iteration(s), %d tokens",
                spec.run_id,
                result.outcome,
                result.detail,
                result.iterations,
                result.tokens,
            )
            return EXIT_OK
        case _Terminated(signal_name):
            # At the deadline the SIGTERM is the Job's activeDeadlineSeconds: say so, as
            # the runner's own deadline would have, whichever of the two came first.
            error = (
                f"{timed_out_message(spec.run_timeout_seconds)} (Kubernetes stopped its pod"
                " at the Job's activeDeadlineSeconds)"
                if at_deadline
                else f"runner terminated by {signal_name} before the run finished"
            )
            written = journal.fail(FailReason.ERROR, error)
            log.warning(
                "run %d: %s received; failure %s",
                spec.run_id,
                signal_name,
                "recorded" if written else "not needed (row already final)",
            )
            return EXIT_OK
        case _RowLost():
            log.warning(
                "run %d is no longer running (reaped?); stopping without writing", spec.run_id
            )
            return EXIT_OK
        case _LoopCrashed(error):
            journal.fail(FailReason.ERROR, f"runner crashed: {error} (traceback in the pod log)")
            return EXIT_CRASH
        case None:
            journal.fail(FailReason.ERROR, timed_out_message(spec.run_timeout_seconds))
            return EXIT_OK
