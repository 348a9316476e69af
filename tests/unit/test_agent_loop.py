"""The loop's rules over fake ports: tokens as it goes, the cap, failures, refused writes, stop."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from achilles.domain.run_trace import Step
from achilles.domain.runs import FailReason
from achilles.errors import ModelCallFailed
from achilles.llm.chat import ChatReply, Message, ToolCall, Usage
from achilles.runner.loop import AgentLoop, LoopLimits, Outcome
from achilles.tools.base import ToolContext
from achilles.tools.catalogue import select_tools


def _reply(
    content: str | None = None, calls: Sequence[tuple[str, str]] = (), tokens: int = 10
) -> ChatReply:
    return ChatReply(
        content=content,
        tool_calls=tuple(ToolCall(f"c{i}", name, args) for i, (name, args) in enumerate(calls)),
        usage=Usage(tokens - 1, 1, tokens) if tokens else None,
        finish_reason="tool_calls" if calls else "stop",
    )


class ScriptedModel:
    def __init__(self, *replies: ChatReply | Exception) -> None:
        self.replies = list(replies)
        self.seen: list[list[Message]] = []
        self.timeouts: list[float] = []

    def complete(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], *, timeout: float
    ) -> ChatReply:
        self.seen.append(list(messages))
        self.timeouts.append(timeout)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


@dataclass
class FakeJournal:
    refuse_after: int | None = None  # refuse writes after this many succeeded
    writes: list[tuple[str, object]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)

    def record_step(self, step: Step) -> None:
        self.steps.append(step)

    def _accept(self, entry: tuple[str, object]) -> bool:
        if self.refuse_after is not None and len(self.writes) >= self.refuse_after:
            return False
        self.writes.append(entry)
        return True

    def add_tokens(self, tokens: int) -> bool:
        return self._accept(("tokens", tokens))

    def succeed(self, output: str) -> bool:
        return self._accept(("succeeded", output))

    def fail(self, reason: FailReason, error: str) -> bool:
        return self._accept((f"failed/{reason}", error))


class NoKnowledge:
    def search(self, user_id: int, query: str, *, limit: int) -> list[Any]:
        return []

    def read(self, user_id: int, document_id: int) -> None:
        return None

    def related(self, user_id: int, document_id: int, *, limit: int) -> None:
        return None


def _run(
    model: ScriptedModel,
    journal: FakeJournal,
    *,
    max_iterations: int = 5,
    stop: threading.Event | None = None,
    clock_values: Sequence[float] = (),
) -> Any:
    ticks = iter(clock_values)
    loop = AgentLoop(
        model=model,
        toolbox=select_tools([]).toolbox,
        tool_context=ToolContext(
            run_id=1,
            agent_id=1,
            owner_user_id=1,
            owner_timezone=ZoneInfo("UTC"),
            knowledge=NoKnowledge(),
            transaction=lambda: pytest.fail("no database here"),
            now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
        ),
        journal=journal,
        limits=LoopLimits(
            max_iterations=max_iterations,
            run_timeout_seconds=100,
            deadline=100.0,
            request_timeout=30.0,
        ),
        stop=stop or threading.Event(),
        clock=lambda: next(ticks, 0.0),
    )
    return loop.run([{"role": "user", "content": "go"}])


def test_tokens_are_written_after_every_call_then_the_answer() -> None:
    model = ScriptedModel(
        _reply(calls=[("search_knowledge", '{"query": "a"}')], tokens=7),
        _reply("the answer", tokens=5),
    )
    journal = FakeJournal()
    result = _run(model, journal)
    assert result.outcome is Outcome.SUCCEEDED
    assert (result.iterations, result.tokens) == (2, 12)
    assert journal.writes == [("tokens", 7), ("tokens", 5), ("succeeded", "the answer")]
    # The tool result went back to the model under the call's id.
    assert model.seen[1][-1] == {"role": "tool", "tool_call_id": "c0", "content": '{"results": []}'}


def test_the_cap_counts_model_calls_and_skips_the_last_calls_tools() -> None:
    search = ("search_knowledge", '{"query": "a"}')
    model = ScriptedModel(*(_reply(calls=[search], tokens=3) for _ in range(3)))
    journal = FakeJournal()
    result = _run(model, journal, max_iterations=3)
    assert result.outcome is Outcome.FAILED
    assert journal.writes[-1] == (
        "failed/iteration_cap",
        "the model was still calling tools after 3 iterations",
    )
    assert [w for w in journal.writes if w[0] == "tokens"] == [("tokens", 3)] * 3
    assert len(model.seen) == 3


def test_a_model_failure_is_recorded_with_its_detail() -> None:
    model = ScriptedModel(ModelCallFailed("model API returned HTTP 500: boom"))
    journal = FakeJournal()
    assert _run(model, journal).outcome is Outcome.FAILED
    assert journal.writes == [("failed/error", "model API returned HTTP 500: boom")]


def test_an_empty_final_answer_is_an_error_not_a_success() -> None:
    journal = FakeJournal()
    _run(ScriptedModel(_reply("  ", tokens=2)), journal)
    assert journal.writes[-1] == (
        "failed/error",
        "the model ended without an answer (finish_reason 'stop')",
    )


def test_no_usage_counts_nothing_and_writes_nothing() -> None:
    journal = FakeJournal()
    _run(ScriptedModel(_reply("ok", tokens=0)), journal)
    assert journal.writes == [("succeeded", "ok")]


def test_a_refused_token_write_stops_everything() -> None:
    model = ScriptedModel(_reply(calls=[("search_knowledge", '{"query": "a"}')]), _reply("x"))
    journal = FakeJournal(refuse_after=0)
    result = _run(model, journal)
    assert result.outcome is Outcome.ROW_LOST
    assert journal.writes == []
    assert len(model.seen) == 1  # no tool ran, no second call


def test_a_stop_request_ends_the_loop_without_writing_a_verdict() -> None:
    stop = threading.Event()
    stop.set()
    journal = FakeJournal()
    model = ScriptedModel(_reply("never asked"))
    assert _run(model, journal, stop=stop).outcome is Outcome.STOPPED
    assert journal.writes == []
    assert model.seen == []


def test_the_deadline_fails_the_run_and_caps_each_request() -> None:
    journal = FakeJournal()
    model = ScriptedModel(_reply(calls=[("search_knowledge", '{"query": "a"}')]), _reply("late"))
    # clock: 90 s at the first call (10 s left), then past the deadline.
    result = _run(model, journal, clock_values=[90.0, 101.0])
    assert result.outcome is Outcome.FAILED
    assert model.timeouts == [10.0]
    assert journal.writes[-1] == ("failed/error", "run timed out: it exceeded its limit of 100 s")
