"""A run's trace in the journal (issue 21): the real runner, as the runner's login, against
the tests' model server records each model call, tool call and inbox ask as a step, and
what the run used; the cap; nothing after the run ended; the steps go with the run."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, delete, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from achilles.db.database import Database
from achilles.db.journal import run_trace
from achilles.db.journal import runs as journal
from achilles.db.journal.models import Agent, AgentRun, AgentRunStep
from achilles.domain.run_secret import RunSecret
from achilles.domain.run_trace import (
    MAX_STEPS_PER_RUN,
    TRUNCATED_SEQ,
    NumberedStep,
    RunUsed,
    Step,
    StepKind,
    ToolStatus,
)
from achilles.domain.runs import FailReason, RunTrigger
from achilles.modelserver.script import load_script
from achilles.runner.prompt import DEFAULT_PLATFORM_PROMPT
from achilles.services.run_journal import RunJournal
from tests.db.factories import make_agent
from tests.db.ks_fixtures import KnowledgeFixture, load_demo_knowledge
from tests.db.logins import admin, run_pod
from tests.db.runner_support import (
    RunnerProcess,
    achilles,
    add_model,
    add_tool,
    queue_run,
    run_row,
    run_scripted,
    run_to_end,
    serving,
)
from tests.waiting import wait_for

INSUFFICIENT_PRIVILEGE = "42501"
AT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def ks(db: Engine) -> KnowledgeFixture:
    return load_demo_knowledge(db)


def _steps(engine: Engine, run_id: int) -> list[AgentRunStep]:
    with Session(engine) as session:
        return list(
            session.execute(
                select(AgentRunStep).where(AgentRunStep.run_id == run_id).order_by(AgentRunStep.seq)
            ).scalars()
        )


def _last_call_arguments(body: dict[str, Any]) -> str:
    """The arguments of the last tool call the model made, as the runner sent them back."""
    calls = [m for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    return str(calls[-1]["tool_calls"][-1]["function"]["arguments"])


def _last_tool_result(body: dict[str, Any]) -> str:
    return str([m for m in body["messages"] if m["role"] == "tool"][-1]["content"])


def _used(engine: Engine, run_id: int) -> RunUsed | None:
    with Session(engine) as session:
        return run_trace.used_by_run(session, run_id)


def test_a_run_records_its_model_and_tool_calls_and_what_it_used(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    run = run_scripted(db, database_url, load_script())
    assert run.code == 0, run.log
    assert run.row.state == "succeeded"
    steps = _steps(db, run.run_id)
    assert [(s.seq, s.kind, s.tool, s.status) for s in steps] == [
        (1, "model_call", None, None),
        (2, "tool_call", "search_knowledge", "ok"),
        (3, "model_call", None, None),
        (4, "tool_call", "read_document", "ok"),
        (5, "model_call", None, None),
    ]
    model_steps = [s for s in steps if s.kind == "model_call"]
    # Each model call's tokens as the server reported them; together the run's.
    assert [(s.input_tokens or 0) + (s.output_tokens or 0) for s in model_steps] == [
        r.total_tokens for r in run.requests
    ]
    assert sum((s.input_tokens or 0) + (s.output_tokens or 0) for s in model_steps) == (
        run.row.tokens_used
    )
    assert [s.finish_reason for s in model_steps] == ["tool_calls", "tool_calls", "stop"]
    assert {s.model for s in model_steps} == {"scripted-model"}
    for step in steps:
        assert step.error is None
        assert step.latency_ms >= 0
        assert step.started_at <= step.ended_at
    # Sizes, never contents: the read document's result is only counted.
    read = steps[3]
    assert read.argument_bytes == len(_last_call_arguments(run.requests[2].body).encode())
    assert read.result_bytes == len(_last_tool_result(run.requests[2].body).encode())

    used = _used(db, run.run_id)
    assert used is not None
    assert (used.model, used.provider_model) == ("scripted", "scripted-model")
    assert used.endpoint_host.startswith("127.0.0.1:")
    expected = json.dumps([DEFAULT_PLATFORM_PROMPT, "What is in the onboarding checklist?"])
    assert used.prompt_sha256 == hashlib.sha256(expected.encode()).digest()
    assert used.tools == ("search_knowledge", "read_document", "related_documents")


def test_an_inbox_ask_and_a_failed_tool_call_are_steps_of_their_own(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    script = {
        "rules": [
            {
                "when": {"turn": 0},
                "reply": {
                    "tool_calls": [
                        {
                            "name": "inbox_ask",
                            "arguments": {"key": "budget", "question": "Who owns Q3?"},
                        },
                        {"name": "read_document", "arguments": {"document_id": "abc"}},
                    ]
                },
            },
            {"reply": {"content": "asked"}},
        ]
    }
    with serving(script) as server:
        inbox = add_tool(db, "inbox", "inbox")
        run_id = queue_run(db, owner="alice", model=add_model(db, server), tool_ids=[inbox])
        code, log = run_to_end(database_url, run_id)
    assert code == 0, log
    steps = _steps(db, run_id)
    assert [(s.kind, s.tool, s.status) for s in steps] == [
        ("model_call", None, None),
        ("inbox_ask", "inbox_ask", "ok"),
        ("tool_call", "read_document", "error"),
        ("model_call", None, None),
    ]
    assert steps[2].error is not None
    assert steps[2].error.startswith("invalid arguments for read_document: document_id")
    used = _used(db, run_id)
    assert used is not None
    assert "inbox_ask" in used.tools


def test_a_run_keeps_200_steps_then_one_truncated_marker(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    # Two model calls of 110 clock calls each, then the answer: 223 steps happened.
    calls = [{"name": "current_time"}] * 110
    script = {
        "rules": [
            {"when": {"turn": 0}, "reply": {"tool_calls": calls}},
            {"when": {"turn": 1}, "reply": {"tool_calls": calls}},
            {"reply": {"content": "it is late"}},
        ]
    }
    with serving(script) as server:
        clock = add_tool(db, "clock", "clock")
        run_id = queue_run(db, owner="alice", model=add_model(db, server), tool_ids=[clock])
        code, log = run_to_end(database_url, run_id)
    assert code == 0, log
    assert run_row(db, run_id).state == "succeeded"
    steps = _steps(db, run_id)
    assert [s.seq for s in steps] == list(range(1, TRUNCATED_SEQ + 1))
    assert len(steps) == MAX_STEPS_PER_RUN + 1
    assert [s.kind for s in steps[:3]] == ["model_call", "tool_call", "tool_call"]
    assert steps[111].kind == "model_call"
    assert {s.tool for s in steps[112:-1]} == {"current_time"}
    marker = steps[-1]
    assert marker.kind == "truncated"
    assert (marker.model, marker.tool, marker.error) == (None, None, None)


def test_a_reaped_run_gets_no_more_steps(
    ks: KnowledgeFixture, db: Engine, database_url: str
) -> None:
    """The runner's first model call is written with its tokens; the run is reaped while
    the second call is in flight; the second call's tokens and the steps since are
    refused, and the runner stops writing."""
    script = {
        "rules": [
            {
                "when": {"turn": 0},
                "reply": {
                    "tool_calls": [{"name": "search_knowledge", "arguments": {"query": "deploy"}}]
                },
            },
            {"reply": {"content": "too late", "delay_seconds": 3}},
        ]
    }
    with serving(script) as server:
        run_id = queue_run(db, owner="alice", model=add_model(db, server))
        runner = RunnerProcess(database_url, run_id)
        try:
            wait_for(lambda: len(_steps(db, run_id)) == 1, timeout=60, what="the first step")
            with Session(db) as session, session.begin():
                assert journal.fail_run(session, run_id, FailReason.STALE, "reaped by the test")
            code = runner.wait()
        finally:
            runner.kill()
    assert code == 0, runner.log
    row = run_row(db, run_id)
    assert (row.state, row.reason, row.error) == ("failed", "stale", "reaped by the test")
    assert [s.kind for s in _steps(db, run_id)] == ["model_call"]


def _step(kind: StepKind = StepKind.TOOL_CALL) -> Step:
    return Step(
        kind=kind,
        started_at=AT,
        ended_at=AT,
        latency_ms=1.5,
        tool="search_knowledge",
        status=ToolStatus.OK,
        argument_bytes=10,
        result_bytes=20,
    )


def _runner_session(database_url: str, run_id: int) -> tuple[Database, RunJournal]:
    """A run pod's database: the runner's login with the run's secret."""
    secret = RunSecret.new()
    with admin(database_url).transaction() as session:
        session.execute(
            text("UPDATE agent_runs SET runner_secret_hash = :h WHERE id = :id"),
            {"h": secret.digest, "id": run_id},
        )
    database = run_pod(database_url, run_id, secret.value)
    return database, RunJournal(database)


def _queued_run(db: Engine) -> int:
    agent = make_agent(db)
    with Session(db) as session, session.begin():
        return journal.enqueue_run(session, agent, RunTrigger.MANUAL).run_id


def test_the_runners_login_writes_steps_of_its_running_run_only(
    db: Engine, database_url: str
) -> None:
    run_a, run_b = _queued_run(db), _queued_run(db)
    database, runner = _runner_session(database_url, run_a)
    try:
        assert runner.claim(run_a) is not None
        assert runner.add_tokens(run_a, 5, [NumberedStep(1, _step())])
        # Another run's steps: the policy refuses them (and the guard finds no row).
        with pytest.raises(DBAPIError) as refused, database.transaction() as session:
            session.execute(
                text(
                    "INSERT INTO agent_run_steps (run_id, seq, kind, started_at, ended_at,"
                    " latency_ms, tool, status) VALUES (:run, 1, 'tool_call', now(), now(), 1,"
                    " 't', 'ok')"
                ),
                {"run": run_b},
            )
        assert getattr(refused.value.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE
        # Reading, changing or deleting steps is not the runner's.
        for statement in (
            "SELECT count(*) FROM agent_run_steps",
            "UPDATE agent_run_steps SET latency_ms = 0",
            "DELETE FROM agent_run_steps",
        ):
            with pytest.raises(DBAPIError) as denied, database.transaction() as session:
                session.execute(text(statement))
            assert getattr(denied.value.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE

        # The run ends (the reaper, here by hand): nothing more goes in, by the guard
        # nor by a statement of the runner's own.
        with Session(db) as session, session.begin():
            assert journal.fail_run(session, run_a, FailReason.STALE, "reaped")
        assert not runner.add_tokens(run_a, 5, [NumberedStep(2, _step())])
        assert not runner.fail(run_a, FailReason.ERROR, "late", [NumberedStep(2, _step())])
        with pytest.raises(DBAPIError) as after, database.transaction() as session:
            session.execute(
                text(
                    "INSERT INTO agent_run_steps (run_id, seq, kind, started_at, ended_at,"
                    " latency_ms, tool, status) VALUES (:run, 2, 'tool_call', now(), now(), 1,"
                    " 't', 'ok')"
                ),
                {"run": run_a},
            )
        assert getattr(after.value.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE
    finally:
        database.dispose()
    assert [s.seq for s in _steps(db, run_a)] == [1]
    assert _steps(db, run_b) == []
    assert run_row(db, run_a).tokens_used == 5


def test_what_a_run_used_is_written_once(db: Engine, database_url: str) -> None:
    run_id = _queued_run(db)
    used = RunUsed("m", "example.com", "gpt-x", b"\x01" * 32, ("search_knowledge",))
    database, runner = _runner_session(database_url, run_id)
    try:
        assert runner.claim(run_id) is not None
        assert runner.add_tokens(run_id, 1, used=used)
        assert runner.add_tokens(run_id, 1, used=used)  # the same record again changes nothing
        other = RunUsed("m", "evil.example", "gpt-x", b"\x02" * 32, ())
        with pytest.raises(DBAPIError) as refused:
            runner.add_tokens(run_id, 1, used=other)
        assert getattr(refused.value.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE
        assert "recorded once" in str(refused.value)
    finally:
        database.dispose()
    assert _used(db, run_id) == used
    assert run_row(db, run_id).tokens_used == 2


def test_a_runs_steps_go_with_the_run(db: Engine, database_url: str) -> None:
    run_id = _queued_run(db)
    database, runner = _runner_session(database_url, run_id)
    try:
        assert runner.claim(run_id) is not None
        steps = [NumberedStep(n, _step()) for n in range(1, 4)]
        assert runner.fail(run_id, FailReason.ERROR, "the model gave up", steps)
    finally:
        database.dispose()
    assert len(_steps(db, run_id)) == 3
    row = run_row(db, run_id)  # the write's own values beside the steps' arrays
    assert (row.state, row.reason, row.error) == ("failed", "error", "the model gave up")
    with Session(db) as session, session.begin():
        agent_id = session.execute(
            select(AgentRun.agent_id).where(AgentRun.id == run_id)
        ).scalar_one()
        session.execute(delete(Agent).where(Agent.id == agent_id))
    assert _steps(db, run_id) == []


def test_runs_show_steps_prints_them(ks: KnowledgeFixture, db: Engine, database_url: str) -> None:
    run = run_scripted(db, database_url, load_script())
    assert run.code == 0, run.log
    shown = achilles(database_url, "runs", "show", str(run.run_id), "--steps")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "used model:" in out
    assert "scripted (scripted-model at 127.0.0.1:" in out
    assert "search_knowledge, read_document, related_documents" in out
    lines = [line for line in out.splitlines() if line.strip().startswith(("1 ", "2 ", "5 "))]
    assert len(lines) == 3
    assert "model_call" in lines[0]
    assert "scripted-model" in lines[0]
    assert "tool_call" in lines[1]
    assert "search_knowledge" in lines[1]
    assert "ok" in lines[1]
    assert "stop" in lines[2]
    as_json = achilles(database_url, "runs", "show", str(run.run_id), "--steps", "--json")
    assert as_json.returncode == 0, as_json.stderr
    record = json.loads(as_json.stdout)
    assert [s["kind"] for s in record["steps"]] == [
        "model_call",
        "tool_call",
        "model_call",
        "tool_call",
        "model_call",
    ]
    assert record["used"]["tools"] == ["search_knowledge", "read_document", "related_documents"]
    assert len(record["used"]["prompt_sha256"]) == 64
