"""A claimed run's agent loop: its tools, its model client, and the wait for its end.

Imported by the process (`runner/main.py`) only after the claim, once the heartbeat
beats: this is the heavy part of the runner (openai, pydantic's tool models), and the
claim, the run's first heartbeat, should not wait for it. The main thread waits here for
the first of the events `runner/main.py` lists.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from datetime import UTC, datetime
from functools import partial

from achilles.domain.run_spec import ModelEndpoint, RunSpec
from achilles.domain.run_trace import RunUsed, endpoint_host
from achilles.domain.runs import FailReason
from achilles.domain.timezones import load_timezone
from achilles.llm.chat import OpenAIChatModel
from achilles.runner.config import RunnerConfig
from achilles.runner.events import (
    EXIT_CRASH,
    EXIT_OK,
    Event,
    LoopCrashed,
    LoopFinished,
    RowLost,
    Terminated,
)
from achilles.runner.loop import AgentLoop, LoopLimits, timed_out_message
from achilles.runner.prompt import compose_messages, composed_prompt_digest
from achilles.runner.reach import when_reachable
from achilles.runner.steps import StepJournal
from achilles.runner.tracing import RunTrace, close_run_trace, start_run_trace
from achilles.services.run_journal import RunJournal
from achilles.tools import approvals
from achilles.tools.base import ToolContext
from achilles.tools.catalogue import select_tools
from achilles.tools.mcp import McpConnections, mcp_tools

log = logging.getLogger(__name__)

# What the openai client gets for models without an API key Secret (keyless local servers).
NO_API_KEY = "no-key"

# The runner's own deadline comes this long after its Job's activeDeadlineSeconds.
OWN_DEADLINE_GRACE = 10.0
# A SIGTERM this close to the Job's deadline is the deadline's (the database's and this
# host's clocks, and the Job controller's reaction, are not exact).
DEADLINE_SLACK = 2.0


def execute(
    spec: RunSpec,
    config: RunnerConfig,
    database: RunJournal,
    events: queue.SimpleQueue[Event],
    *,
    model_endpoint: ModelEndpoint,
    claimed: float,
    stop: threading.Event,
) -> int:
    """Run the claimed, accepted run's agent loop on `model_endpoint` (the spec's) and
    wait for the first event.

    `claimed` is the claim's `time.monotonic()`: deadlines count from it, not from
    this module's import. `stop` stops the loop (the heartbeat beats on until the
    process's work is done: `runner/main.py`)."""
    trace = start_run_trace(spec, model_endpoint, claimed=claimed)
    # The run's MCP sessions, one per server, opened at the first call (issue 38).
    connections = McpConnections()
    try:
        return _execute(
            spec, config, database, events, model_endpoint, claimed, stop,
            trace=trace, connections=connections,
        )  # fmt: skip
    finally:
        connections.close()
        close_run_trace(trace, spec.run_id)


def _execute(
    spec: RunSpec,
    config: RunnerConfig,
    database: RunJournal,
    events: queue.SimpleQueue[Event],
    model_endpoint: ModelEndpoint,
    claimed: float,
    stop: threading.Event,
    *,
    trace: RunTrace | None,
    connections: McpConnections,
) -> int:
    # The agent's MCP sources' tools, with the credentials its Job gave the pod.
    selection = select_tools(
        spec.tool_implementations,
        mcp_tools(spec.mcp_sources, os.environ, approvals.ask, connections),
    )
    # What the run uses, for the record: it rides on the run's first write.
    used = RunUsed(
        model=model_endpoint.name,
        endpoint_host=endpoint_host(model_endpoint.base_url),
        provider_model=model_endpoint.provider_model,
        prompt_sha256=composed_prompt_digest(spec),
        tools=selection.toolbox.names,
    )
    journal = StepJournal(database, spec.run_id, used, observer=trace)
    # In a Job, the run's limit counts from the Job's start, as its activeDeadlineSeconds
    # does, not from this claim: the pod's start-up has already used part of it.
    # Kubernetes enforces it (SIGTERM, then SIGKILL: even a runner that hangs is
    # stopped); the runner's own deadline, a little later, is the backstop should it not.
    # Without a Job (a runner started by hand) the runner's deadline is the only one.
    job_deadline: float | None = None
    deadline = claimed + spec.run_timeout_seconds
    if spec.seconds_since_dispatch is not None:
        job_deadline = claimed + spec.run_timeout_seconds - spec.seconds_since_dispatch
        deadline = job_deadline + OWN_DEADLINE_GRACE

    if selection.unknown:
        log.warning("skipping tools unknown to this runner: %s", ", ".join(selection.unknown))
    model = OpenAIChatModel(
        base_url=model_endpoint.base_url,
        api_key=config.api_key or NO_API_KEY,
        model=model_endpoint.provider_model,
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
            max_run_tokens=spec.max_run_tokens,
        ),
        stop=stop,
        model_id=model_endpoint.provider_model,
    )
    # Approved calls are made, and decided approvals told, before the model is called.
    # The journal work up to the model call waits out a database gone away, as the run's
    # load did (`runner/reach.py`). Trying the approvals' start again never makes a call
    # twice: each is claimed (a committed, guarded UPDATE) before it is made, and one
    # claimed by this run is not approved any more (an outcome lost to the outage is then
    # "unknown", as for a run that crashed making it).
    approved = None
    if spec.approvals_owed:
        approved = when_reachable(
            "settling the approvals",
            lambda: approvals.start_note(tool_context, spec.mcp_sources, os.environ, connections),
        )
    notes = [approved] if approved else []
    for hook in selection.run_start_notes:
        if note := when_reachable("the run's start notes", partial(hook, tool_context)):
            notes.append(note)
    messages = compose_messages(spec, datetime.now(UTC), notes)
    log.info("offering tools: %s", ", ".join(selection.toolbox.names))

    def work() -> None:
        try:
            events.put(LoopFinished(loop.run(messages)))
        except Exception as exc:
            log.exception("the agent loop crashed")
            events.put(LoopCrashed(f"{type(exc).__name__}: {exc}"))

    threading.Thread(target=work, name="agent-loop", daemon=True).start()
    try:
        event: Event | None = events.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        event = None
    stop.set()
    at_deadline = job_deadline is not None and time.monotonic() >= job_deadline - DEADLINE_SLACK
    return _conclude(event, journal, spec, at_deadline=at_deadline)


def _conclude(
    event: Event | None, journal: StepJournal, spec: RunSpec, *, at_deadline: bool
) -> int:
    match event:
        case LoopFinished(result):
            log.info(
                "run %d: %s (%s) after %d iteration(s), %d tokens",
                spec.run_id,
                result.outcome,
                result.detail,
                result.iterations,
                result.tokens,
            )
            return EXIT_OK
        case Terminated(signal_name):
            # At the deadline the SIGTERM is the Job's activeDeadlineSeconds: say so, as
            # the runner's own deadline would have, whichever of the two came first.
            error = (
                f"{timed_out_message(spec.run_timeout_seconds)} (Kubernetes stopped its pod"
                " at the Job's activeDeadlineSeconds)"
                if at_deadline
                else f"runner terminated by {signal_name} before the run finished"
            )
            written = _record_fail(journal, spec, error)
            log.warning(
                "run %d: %s received; failure %s",
                spec.run_id,
                signal_name,
                "recorded" if written else "not needed (row already final)",
            )
            return EXIT_OK
        case RowLost():
            log.warning(
                "run %d is no longer running (reaped?); stopping without writing", spec.run_id
            )
            return EXIT_OK
        case LoopCrashed(error):
            _record_fail(journal, spec, f"runner crashed: {error} (traceback in the pod log)")
            return EXIT_CRASH
        case None:
            _record_fail(journal, spec, timed_out_message(spec.run_timeout_seconds))
            return EXIT_OK


def _record_fail(journal: StepJournal, spec: RunSpec, error: str) -> bool:
    """The run's end written once the database answers (`runner/reach.py`); guarded by
    the row's state, so a write tried again after an ambiguous failure is refused (False:
    the row already left `running`), never doubled."""
    return when_reachable(
        f"recording run {spec.run_id}'s end", lambda: journal.fail(FailReason.ERROR, error)
    )
