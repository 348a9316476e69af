"""`achilles bench run-steps`: what recording a run's steps costs the runner (issue 21).

Against a real, durable PostgreSQL, through the runner's own journal code, as the runner's
login with the run's secret (row-level security and the triggers of 0011/0012 included).
A run of 50 steps is 25 model calls, each followed by a tool call; before issue 21 it wrote
its claim, one tokens write per model call and its outcome.

- Cost per step: in each of `--size` runs, 25 rounds of three tokens writes: as before
  (`journal.add_tokens`), by the statement that carries steps but with none, and carrying
  two steps (the tool call before it and its model call, as the runner's `StepJournal`
  hands them over), each first as often. The cost is the larger of the differences with
  two steps against each of the others / 2 (medians of the rounds: the machine's load
  moves a round's writes together). The process's CPU per step likewise.
- Writes per run: three whole runs of each kind (without steps, and with them and what
  the run used through `StepJournal`) counted: transactions that write, statements, WAL
  bytes.

The model and the tools take no time here: the figures are the journal's alone. The
run's OpenTelemetry trace, off and on, is measured too (`bench/run_tracing.py`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import event, insert, text

from achilles.db.database import Database
from achilles.db.journal import run_trace
from achilles.db.journal import runs as journal
from achilles.db.journal.agents import create_agent
from achilles.db.journal.models import AgentModel, User
from achilles.db.roles import Component
from achilles.domain.run_secret import RunSecret, session_settings
from achilles.domain.run_trace import RunUsed, Step, StepKind, ToolStatus, prompt_digest
from achilles.domain.runs import RunTrigger
from achilles.runner.steps import StepJournal
from achilles.services.db_roles import grant_login_url
from achilles.services.run_journal import RunJournal
from bench.pg import bench_database
from bench.report import Progress, Report, at_most
from bench.run_tracing import tracing_figures

NAME = "run-steps"
DEFAULT_SIZE = 40
COUNTED_RUNS = 3
MODEL_CALLS = 25  # each followed by a tool call: 50 steps
STEPS = 2 * MODEL_CALLS
RUNNER_LOGIN = "achilles_bench_runner"
TOOLS = ("search_knowledge", "read_document", "related_documents", "current_time")


@dataclass
class RunCost:
    seconds: float
    transactions: int  # committed transactions that wrote
    statements: int  # statements sent, the pool's pings aside
    wal_bytes: int


def _model_step() -> Step:
    now = datetime.now(UTC)
    return Step(
        kind=StepKind.MODEL_CALL,
        started_at=now,
        ended_at=now,
        latency_ms=850.0,
        model="gpt-small-2026-01",
        input_tokens=1800,
        output_tokens=120,
        finish_reason="tool_calls",
    )


def _tool_step() -> Step:
    now = datetime.now(UTC)
    return Step(
        kind=StepKind.TOOL_CALL,
        started_at=now,
        ended_at=now,
        latency_ms=12.0,
        tool="search_knowledge",
        status=ToolStatus.OK,
        argument_bytes=42,
        result_bytes=2300,
    )


USED = RunUsed(
    model="gpt-small",
    endpoint_host="llm.internal:443",
    provider_model="gpt-small-2026-01",
    prompt_sha256=prompt_digest("platform prompt", "owner prompt"),
    tools=TOOLS,
)


def _replay(database: RunJournal, run_id: int, *, with_steps: bool) -> None:
    """What a 50-step run writes after its claim."""
    if not with_steps:
        for _ in range(MODEL_CALLS):
            assert database.add_tokens(run_id, 1920)
        assert database.succeed(run_id, "the answer")
        return
    steps = StepJournal(database, run_id, USED)
    for _ in range(MODEL_CALLS):
        steps.record_step(_model_step())
        assert steps.add_tokens(1920)
        steps.record_step(_tool_step())
    assert steps.succeed("the answer")


def _wal_lsn(admin: Database) -> int:
    with admin.engine.connect() as conn:
        value = conn.execute(text("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")).scalar_one()
    return int(value)


def _queued_run(admin: Database, runner_url: str, agent_id: int) -> tuple[int, Database]:
    """A queued run of the agent with its Job's secret, and the runner's database for it."""
    with admin.transaction() as session:
        run_id = journal.enqueue_run(session, agent_id, RunTrigger.MANUAL).run_id
        secret = RunSecret.new()
        session.execute(
            text("UPDATE agent_runs SET runner_secret_hash = :h WHERE id = :id"),
            {"h": secret.digest, "id": run_id},
        )
    database = Database(
        runner_url,
        pool_size=1,
        application_name="achilles-bench-runner",
        session_settings=session_settings(run_id, secret.value),
    )
    return run_id, database


def _counted_run(admin: Database, runner_url: str, agent_id: int, *, with_steps: bool) -> RunCost:
    """One whole 50-step run after its claim, its writes counted."""
    run_id, database = _queued_run(admin, runner_url, agent_id)
    counts = {"transactions": 0, "statements": 0}

    def on_commit(_conn: object) -> None:
        counts["transactions"] += 1

    def on_statement(*args: object) -> None:
        if str(args[2]).strip() != "SELECT 1":  # the pool's ping
            counts["statements"] += 1

    try:
        runner = RunJournal(database)
        assert runner.claim(run_id) is not None  # connects; counted as the run's first write
        event.listen(database.engine, "commit", on_commit)
        event.listen(database.engine, "before_cursor_execute", on_statement)
        wal_before = _wal_lsn(admin)
        started = time.perf_counter()
        _replay(runner, run_id, with_steps=with_steps)
        seconds = time.perf_counter() - started
        wal_bytes = _wal_lsn(admin) - wal_before
    finally:
        database.dispose()
    return RunCost(seconds, counts["transactions"] + 1, counts["statements"] + 1, wal_bytes)


@dataclass
class Pairs:
    """Per round of tokens writes: (as before, the steps' statement with none, the same
    with two) wall seconds and CPU seconds."""

    wall: list[tuple[float, float, float]]
    cpu: list[tuple[float, float, float]]


def _timed_write(write: Callable[[], bool]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    assert write()
    return time.perf_counter() - wall, time.process_time() - cpu


def _paired_run(admin: Database, runner_url: str, agent_id: int, pairs: Pairs) -> None:
    run_id, database = _queued_run(admin, runner_url, agent_id)
    try:
        runner = RunJournal(database)
        assert runner.claim(run_id) is not None
        # What the run used rides on its first write: one round more, not measured.
        steps = StepJournal(runner, run_id, USED)
        steps.record_step(_model_step())
        assert steps.add_tokens(1920)

        def with_steps() -> bool:
            steps.record_step(_tool_step())
            steps.record_step(_model_step())
            return steps.add_tokens(1920)

        def without() -> bool:
            return runner.add_tokens(run_id, 1920)

        def no_steps() -> bool:
            with database.transaction() as session:
                write = run_trace.tokens_write(1920)
                return run_trace.write_with_steps(session, run_id, write, [])

        writes = (without, no_steps, with_steps)
        for n in range(MODEL_CALLS):
            order = [(n + k) % 3 for k in range(3)]  # each write first as often
            timed: dict[int, tuple[float, float]] = {}
            for index in order:
                timed[index] = _timed_write(writes[index])
            pairs.wall.append((timed[0][0], timed[1][0], timed[2][0]))
            pairs.cpu.append((timed[0][1], timed[1][1], timed[2][1]))
        assert runner.succeed(run_id, "the answer")
    finally:
        database.dispose()


def _setup(admin: Database, runs: int) -> list[int]:
    with admin.transaction() as session:
        # Every run spends tokens; none may be skipped for the owner's budget.
        session.execute(text("UPDATE platform_settings SET agent_weekly_token_budget = 10^15"))
        session.execute(insert(User).values(key="bench-owner"))
        session.execute(
            insert(AgentModel).values(
                name="bench-model", base_url="http://llm.internal/v1", provider_model="gpt-small"
            )
        )
        return [
            create_agent(
                session,
                owner_key="bench-owner",
                name=f"agent-{n}",
                prompt="Summarise my week.",
                model_name="bench-model",
            )
            for n in range(runs)
        ]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def run(size: int, json_path: Path | None, server_url: str | None = None) -> Report:
    progress = Progress(NAME)
    report = Report(
        benchmark=NAME,
        size=size,
        parameters={
            "runs_of_25_rounds": size,
            "counted_runs_of_each_kind": COUNTED_RUNS,
            "steps_per_run": STEPS,
        },
    )
    with bench_database(progress, server_url) as target:
        report.details["postgresql"] = target.server
        admin = Database(target.url, pool_size=1, application_name="achilles-bench")
        try:
            runner_url = grant_login_url(
                admin, Component.RUNNER, RUNNER_LOGIN, secrets.token_urlsafe(24)
            )
            agents = _setup(admin, size + 1 + 2 * COUNTED_RUNS)
            # Not measured: the first statements prepared, the tables' first pages read.
            _paired_run(admin, runner_url, agents.pop(), Pairs([], []))
            pairs = Pairs([], [])
            for n in range(size):
                _paired_run(admin, runner_url, agents.pop(), pairs)
                if (n + 1) % 10 == 0:
                    progress(f"{n + 1} runs of 25 rounds")
            without = [_counted_run(admin, runner_url, agents.pop(), with_steps=False)]
            with_steps = [_counted_run(admin, runner_url, agents.pop(), with_steps=True)]
            for _ in range(COUNTED_RUNS - 1):
                without.append(_counted_run(admin, runner_url, agents.pop(), with_steps=False))
                with_steps.append(_counted_run(admin, runner_url, agents.pop(), with_steps=True))
        finally:
            admin.dispose()
    _pair_figures(report, pairs)
    _count_figures(report, without, with_steps)
    progress("the runner's trace, off and on")
    tracing_figures(report, (_model_step(), _tool_step()))
    path = report.write(json_path)
    progress(f"wrote {path} and {path.with_suffix('.md')}")
    return report


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _pair_figures(report: Report, pairs: Pairs) -> None:
    report.latency("tokens write, as before", [w[0] for w in pairs.wall], on="median")
    report.latency(
        "tokens write by the steps' statement, no steps", [w[1] for w in pairs.wall], on="median"
    )
    report.latency("tokens write carrying 2 steps", [w[2] for w in pairs.wall], on="median")
    # Each round's own differences, then their median: the load moves a round's writes
    # together, and its spikes fall outside the median.
    versus_before = _median([(w[2] - w[0]) / 2 for w in pairs.wall])
    versus_none = _median([(w[2] - w[1]) / 2 for w in pairs.wall])
    report.add_value(
        "cost per step recorded",
        1000 * max(versus_before, versus_none),
        "ms",
        goal=at_most(2, "ms"),
        note=f"the larger of (with 2 steps - as before) / 2 = {1000 * versus_before:.3f} ms"
        f" and (with 2 steps - the same statement with none) / 2 = {1000 * versus_none:.3f}"
        " ms (medians of the rounds)",
    )
    report.add_value(
        "runner CPU per step recorded",
        1000 * _median([(c[2] - c[1]) / 2 for c in pairs.cpu]),
        "ms",
        note="the process's CPU (numbering, parameters, psycopg) with 2 steps - with none,"
        " / 2, median of the rounds",
    )


def _count_figures(report: Report, without: list[RunCost], with_steps: list[RunCost]) -> None:
    measures: tuple[tuple[str, str, str], ...] = (
        ("write transactions per run", "", "transactions"),
        ("statements per run", "", "statements"),
        ("WAL per run", "bytes", "wal_bytes"),
    )
    for name, unit, field in measures:
        before = _mean([float(getattr(c, field)) for c in without])
        after = _mean([float(getattr(c, field)) for c in with_steps])
        report.add_value(f"{name}, without steps", before, unit)
        report.add_value(f"{name}, with steps", after, unit)
        goal = at_most(5, "%") if name.startswith("write transactions") else None
        report.add_value(f"{name}: increase", 100 * (after - before) / before, "%", goal=goal)
    report.notes.append(
        "A run's writes without steps: the claim, a tokens write per model call, the outcome"
        " (heartbeats, one per 30 s, not counted: a slower run only lowers the increase)."
        " Steps, and what the run used, ride on those statements."
    )
