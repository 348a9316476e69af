"""A run's OpenTelemetry trace (issue 21): the real runner, against the real database and
the tests' model server through the real openai client, exports OTLP over HTTP to a real
collector (Jaeger v2, `tests/jaeger_collector.py`), continuing the context its Job's
environment carries (`TRACEPARENT`); and with no OTLP endpoint it imports nothing of
OpenTelemetry at all (the import log of the same kind of run)."""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import Engine

from achilles.modelserver.script import load_script
from achilles_dev.jaeger import RunningJaeger, Span
from tests.db.ks_fixtures import load_demo_knowledge
from tests.db.runner_support import run_scripted
from tests.waiting import wait_for

PROMPT = "What is in the onboarding checklist?"  # runner_support's agents' prompt


def _run_trace(jaeger: RunningJaeger, trace_id: str) -> list[Span] | None:
    spans = jaeger.trace(trace_id)
    if spans is None or not any(s.name.startswith("invoke_agent ") for s in spans):
        return None
    return spans


def _values(spans: list[Span]) -> list[Any]:
    return [value for span in spans for value in span.attributes.values()]


def test_a_run_exports_its_trace_under_its_jobs_traceparent(
    db: Engine, database_url: str, jaeger: RunningJaeger
) -> None:
    load_demo_knowledge(db)  # the owner, alice, and the documents the demo script reads
    trace_id, dispatch_span = secrets.token_hex(16), secrets.token_hex(8)
    run = run_scripted(
        db,
        database_url,
        load_script(),
        extra_env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_endpoint,
            "TRACEPARENT": f"00-{trace_id}-{dispatch_span}-01",
        },
    )
    assert (run.code, run.row.state) == (0, "succeeded"), run.log
    # The runner waits for its spans to leave before it exits; the collector stores
    # what it received a moment later.
    spans = wait_for(lambda: _run_trace(jaeger, trace_id), timeout=30, what="the run's trace")

    (root,) = [s for s in spans if s.name.startswith("invoke_agent ")]
    assert root.name == "invoke_agent alice's agent"
    assert root.parent_id == dispatch_span  # the operator's dispatch span, via the Job
    assert root.service == "achilles-runner"
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "alice's agent"
    assert root.attributes["achilles.run.id"] == run.run_id
    assert root.attributes["achilles.run.state"] == "succeeded"
    assert not root.error

    children = [s for s in spans if s is not root]
    assert {s.parent_id for s in children} == {root.span_id}
    chats = [s for s in children if s.name.startswith("chat ")]
    tools = [s for s in children if s.name.startswith("execute_tool ")]
    assert len(chats) + len(tools) == len(children)
    # One span per model call, with the tokens the server reported for it.
    assert len(chats) == len(run.requests) == 3
    for chat in chats:
        assert chat.name == "chat scripted-model"
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == "scripted-model"
        assert chat.attributes["gen_ai.response.model"] == "scripted-model"
        assert chat.attributes["server.address"] == "127.0.0.1"
    assert sorted(
        c.attributes["gen_ai.usage.input_tokens"] + c.attributes["gen_ai.usage.output_tokens"]
        for c in chats
    ) == sorted(r.total_tokens or 0 for r in run.requests)
    assert sum(r.total_tokens or 0 for r in run.requests) == run.row.tokens_used
    reasons = sorted(str(c.attributes["gen_ai.response.finish_reasons"]) for c in chats)
    assert ["stop" in r for r in reasons].count(True) == 1, reasons
    assert ["tool_calls" in r for r in reasons].count(True) == 2, reasons
    assert root.attributes["gen_ai.usage.input_tokens"] == sum(
        c.attributes["gen_ai.usage.input_tokens"] for c in chats
    )
    # One span per tool call, with the model's id of the call.
    assert sorted(t.attributes["gen_ai.tool.name"] for t in tools) == [
        "read_document",
        "search_knowledge",
    ]
    assert sorted(t.name for t in tools) == [
        "execute_tool read_document",
        "execute_tool search_knowledge",
    ]
    for tool in tools:
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["gen_ai.tool.call.id"]
        assert not tool.error
    # Never the prompt, nor what the tools returned: sizes and names only.
    values = [str(v) for v in _values(spans)]
    assert not [v for v in values if PROMPT in v or "checklist" in v.lower()]


ANSWER = {
    "rules": [
        {
            "when": {"turn": 0},
            "reply": {"content": "done", "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
        }
    ]
}


def test_with_no_otlp_endpoint_the_runner_imports_nothing_of_opentelemetry(
    db: Engine, database_url: str
) -> None:
    """Zero cost when off: not even an import. A Job's context alone (`TRACEPARENT`)
    turns nothing on; the whole run's import log names no OpenTelemetry module."""
    load_demo_knowledge(db)
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    run = run_scripted(
        db,
        database_url,
        ANSWER,
        extra_env={"PYTHONPROFILEIMPORTTIME": "1", "TRACEPARENT": f"00-{trace_id}-{span_id}-01"},
    )
    assert (run.code, run.row.state) == (0, "succeeded"), run.log
    imported = [
        line.rsplit("|", 1)[1].strip() for line in run.log.splitlines() if "import time:" in line
    ]
    assert "achilles.runner.execution" in imported  # the log is read right: the whole run
    assert "achilles.telemetry.settings" in imported  # asked, and said off
    traced = [
        m
        for m in imported
        if m.startswith("opentelemetry")
        or m in ("achilles.telemetry.provider", "achilles.telemetry.run_spans")
    ]
    assert traced == []
