"""The agent loop over fake ports (a scripted model, a recording journal, no knowledge
store): shared by the loop's unit tests."""

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
from achilles.llm.chat import ChatReply, Message, ToolCall, Usage
from achilles.runner.loop import AgentLoop, LoopLimits
from achilles.tools.base import ToolContext
from achilles.tools.catalogue import select_tools


def reply(
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


def make_loop(
    model: ScriptedModel,
    journal: FakeJournal,
    *,
    max_iterations: int = 5,
    max_run_tokens: int | None = None,
    stop: threading.Event | None = None,
    clock_values: Sequence[float] = (),
) -> AgentLoop:
    ticks = iter(clock_values)
    return AgentLoop(
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
            max_run_tokens=max_run_tokens,
        ),
        stop=stop or threading.Event(),
        clock=lambda: next(ticks, 0.0),
    )


def run_loop(
    model: ScriptedModel,
    journal: FakeJournal,
    *,
    max_iterations: int = 5,
    stop: threading.Event | None = None,
    clock_values: Sequence[float] = (),
) -> Any:
    loop = make_loop(
        model, journal, max_iterations=max_iterations, stop=stop, clock_values=clock_values
    )
    return loop.run([{"role": "user", "content": "go"}])
