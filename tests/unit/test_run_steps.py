"""A run's steps as the loop records them, the cap, and what a run used (issue 21)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

from achilles.domain.run_trace import (
    MAX_STEP_ERROR_CHARS,
    MAX_STEPS_PER_RUN,
    TRUNCATED_SEQ,
    Step,
    StepKind,
    StepNumbering,
    ToolStatus,
    clip_step_error,
    endpoint_host,
    prompt_digest,
)
from achilles.errors import ModelCallFailed
from tests.unit.loop_support import FakeJournal, ScriptedModel, reply, run_loop

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _step(kind: StepKind = StepKind.TOOL_CALL) -> Step:
    return Step(
        kind=kind, started_at=AT, ended_at=AT, latency_ms=1.0, tool="t", status=ToolStatus.OK
    )


def test_model_and_tool_calls_become_steps_in_order() -> None:
    model = ScriptedModel(
        reply(calls=[("search_knowledge", '{"query": "a"}'), ("no_such_tool", "{}")], tokens=7),
        reply("the answer", tokens=5),
    )
    journal = FakeJournal()
    run_loop(model, journal)
    kinds = [(s.kind, s.tool, s.status) for s in journal.steps]
    assert kinds == [
        (StepKind.MODEL_CALL, None, None),
        (StepKind.TOOL_CALL, "search_knowledge", ToolStatus.OK),
        (StepKind.TOOL_CALL, "no_such_tool", ToolStatus.ERROR),
        (StepKind.MODEL_CALL, None, None),
    ]
    first, search, unknown, last = journal.steps
    assert (first.input_tokens, first.output_tokens, first.finish_reason) == (6, 1, "tool_calls")
    assert (last.input_tokens, last.output_tokens, last.finish_reason) == (4, 1, "stop")
    assert search.argument_bytes == len(b'{"query": "a"}')
    assert search.result_bytes == len(b'{"results": []}')
    assert search.error is None
    assert unknown.error is not None
    assert "unknown tool 'no_such_tool'" in unknown.error
    assert all(s.latency_ms >= 0 and s.ended_at >= s.started_at for s in journal.steps)


def test_bad_arguments_are_quoted_to_the_model_never_in_the_journal() -> None:
    """A model's argument may be the owner's documents: the model is told what it sent
    (to correct it), the step keeps the diagnosis and the arguments' size only."""
    sent = json.dumps({"document_id": "Q3 salaries: Alice 120k, Bob 95k"})
    model = ScriptedModel(
        reply(calls=[("read_document", sent)], tokens=3), reply("the answer", tokens=2)
    )
    journal = FakeJournal()
    run_loop(model, journal)
    _, read, _ = journal.steps
    assert (read.tool, read.status, read.argument_bytes) == (
        "read_document",
        ToolStatus.ERROR,
        len(sent.encode()),
    )
    assert read.error is not None
    assert read.error.startswith("invalid arguments for read_document: document_id: ")
    assert "salaries" not in read.error
    assert "got" not in read.error
    (told,) = [m for m in model.seen[1] if m["role"] == "tool"]
    assert "(got 'Q3 salaries: Alice 120k, Bob 95k')" in str(told["content"])


def test_a_failed_model_call_is_a_step_with_its_error() -> None:
    journal = FakeJournal()
    run_loop(ScriptedModel(ModelCallFailed("HTTP 503 from the model")), journal)
    (step,) = journal.steps
    assert (step.kind, step.error, step.input_tokens) == (
        StepKind.MODEL_CALL,
        "HTTP 503 from the model",
        None,
    )


def test_numbering_keeps_the_cap_then_one_marker_then_nothing() -> None:
    numbering = StepNumbering()
    numbered = [numbering.number(_step()) for _ in range(MAX_STEPS_PER_RUN + 5)]
    kept = [n for n in numbered if n is not None]
    assert [n.seq for n in kept] == list(range(1, TRUNCATED_SEQ + 1))
    assert kept[-1].step.kind is StepKind.TRUNCATED
    assert kept[-1].step.tool is None
    assert all(n.step.kind is StepKind.TOOL_CALL for n in kept[:-1])


def test_a_long_error_is_clipped() -> None:
    clipped = clip_step_error("x" * 5000)
    assert clipped is not None
    assert len(clipped) == MAX_STEP_ERROR_CHARS
    assert clip_step_error("short") == "short"


def test_the_endpoint_identity_has_no_secret() -> None:
    assert endpoint_host("https://user:s3cret@api.example.com/v1?key=k") == "api.example.com"
    assert endpoint_host("http://127.0.0.1:8400/v1") == "127.0.0.1:8400"
    assert endpoint_host("http://[::1]:8400/v1") == "[::1]:8400"


def test_the_prompt_digest_is_of_both_layers() -> None:
    digest = prompt_digest("platform", "owner")
    assert digest == hashlib.sha256(json.dumps(["platform", "owner"]).encode()).digest()
    assert prompt_digest("platform", "owner") != prompt_digest("platform ", "owner")
    assert prompt_digest("a", "bc") != prompt_digest("ab", "c")
