"""The agent loop: model <-> tools until a final answer, the iteration cap, or a failure.

Pure orchestration over injected ports (a chat model, a toolbox, a journal and
a stop flag), so its rules are testable without a network or a database:

- one iteration = one model call; its `usage` is added to the run's
  `tokens_used` right away, so a run that dies later still counts;
- a reply without tool calls is the final answer -> `succeeded` with `output`;
- the model still calling tools after `max_iterations` calls -> `failed/iteration_cap`;
- a model API failure (after the client's retries) -> `failed/error` with its detail;
- the run's deadline passing -> `failed/error`;
- a journal write refused (the row is no longer `running`: reaped, or failed by
  the process on SIGTERM) -> stop at once and write nothing more;
- the stop flag set (SIGTERM, reaping seen by the heartbeat) -> stop between
  steps; the caller decides what, if anything, to write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from achilles.domain.runs import FailReason
from achilles.errors import ModelCallFailed
from achilles.llm.chat import ChatModel, Message
from achilles.tools.base import ToolContext
from achilles.tools.toolbox import Toolbox

log = logging.getLogger(__name__)


def timed_out_message(limit_seconds: float) -> str:
    return f"run timed out: it exceeded its limit of {limit_seconds:g} s"


class RunJournal(Protocol):
    """This run's row; every method returns False when the row is no longer `running`."""

    def add_tokens(self, tokens: int) -> bool: ...

    def succeed(self, output: str) -> bool: ...

    def fail(self, reason: FailReason, error: str) -> bool: ...


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ROW_LOST = "row_lost"  # a guarded write was refused: someone else owns the row now
    STOPPED = "stopped"


@dataclass(frozen=True)
class LoopResult:
    outcome: Outcome
    detail: str
    iterations: int
    tokens: int


@dataclass(frozen=True)
class LoopLimits:
    max_iterations: int
    run_timeout_seconds: float
    deadline: float  # on the loop's clock (monotonic seconds)
    request_timeout: float  # per model call, capped by the time left


class AgentLoop:
    def __init__(
        self,
        *,
        model: ChatModel,
        toolbox: Toolbox,
        tool_context: ToolContext,
        journal: RunJournal,
        limits: LoopLimits,
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._model = model
        self._toolbox = toolbox
        self._ctx = tool_context
        self._journal = journal
        self._limits = limits
        self._stop = stop
        self._clock = clock
        self._tokens = 0
        self._iterations = 0

    def run(self, messages: list[Message]) -> LoopResult:
        specs = self._toolbox.specs()
        for iteration in range(1, self._limits.max_iterations + 1):
            if self._stop.is_set():
                return self._result(Outcome.STOPPED, "stop requested")
            remaining = self._limits.deadline - self._clock()
            if remaining <= 0:
                return self._fail(
                    FailReason.ERROR, timed_out_message(self._limits.run_timeout_seconds)
                )
            self._iterations = iteration
            try:
                reply = self._model.complete(
                    messages, specs, timeout=min(self._limits.request_timeout, remaining)
                )
            except ModelCallFailed as exc:
                return self._fail(FailReason.ERROR, str(exc))

            used = reply.usage.total_tokens if reply.usage else 0
            if used:
                if not self._journal.add_tokens(used):
                    return self._result(Outcome.ROW_LOST, "token count refused")
                self._tokens += used
            if self._stop.is_set():
                return self._result(Outcome.STOPPED, "stop requested")

            if not reply.tool_calls:
                return self._finish(reply.content, reply.finish_reason)
            log.info(
                "iteration %d: model called %s",
                iteration,
                ", ".join(call.name for call in reply.tool_calls),
            )
            if iteration == self._limits.max_iterations:
                break  # the cap is reached; running these calls could change nothing
            messages.append(reply.as_message())
            for call in reply.tool_calls:
                if self._stop.is_set():
                    return self._result(Outcome.STOPPED, "stop requested")
                result = self._toolbox.invoke(call.name, call.arguments, self._ctx)
                messages.append({"role": "tool", "tool_call_id": call.call_id, "content": result})
        return self._fail(
            FailReason.ITERATION_CAP,
            f"the model was still calling tools after {self._limits.max_iterations} iterations",
        )

    def _finish(self, content: str | None, finish_reason: str) -> LoopResult:
        if not content or not content.strip():
            return self._fail(
                FailReason.ERROR,
                f"the model ended without an answer (finish_reason {finish_reason!r})",
            )
        if not self._journal.succeed(content):
            return self._result(Outcome.ROW_LOST, "final answer refused")
        return self._result(Outcome.SUCCEEDED, "final answer written")

    def _fail(self, reason: FailReason, error: str) -> LoopResult:
        if not self._journal.fail(reason, error):
            return self._result(Outcome.ROW_LOST, f"failure refused: {error}")
        return self._result(Outcome.FAILED, f"{reason}: {error}")

    def _result(self, outcome: Outcome, detail: str) -> LoopResult:
        return LoopResult(
            outcome=outcome, detail=detail, iterations=self._iterations, tokens=self._tokens
        )
