"""The agent loop: model <-> tools until a final answer, the iteration cap, or a failure.

Pure orchestration over injected ports (a chat model, a toolbox, a journal and
a stop flag), so its rules are testable without a network or a database:

- one iteration = one model call; its `usage` is added to the run's
  `tokens_used` right away, so a run that dies later still counts;
- a reply without tool calls is the final answer -> `succeeded` with `output`;
- the model still calling tools after `max_iterations` calls -> `failed/iteration_cap`;
- a model API failure (after the client's retries) -> `failed/error` with its detail;
- the run's deadline passing -> `failed/error`;
- the run's tokens reaching its cap (`max_run_tokens`, the call that reached it
  counted) while the model still calls tools -> `failed/token_cap`; a final answer
  that reaches it is still the answer (nothing more would be spent);
- a journal write refused (the row is no longer `running`: reaped, or failed by
  the process on SIGTERM) -> stop at once and write nothing more;
- the stop flag set (SIGTERM, reaping seen by the heartbeat) -> stop between
  steps; the caller decides what, if anything, to write;
- every model call and tool call is a step of the run (`domain/run_trace.py`), handed
  to the journal as it ends (`record_step`); the journal keeps them for its next write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

from achilles.domain.run_controls import is_token_cap_reached, token_cap_message
from achilles.domain.run_trace import Step, StepKind, ToolStatus, clip_step_error
from achilles.domain.runs import FailReason
from achilles.errors import ModelCallFailed
from achilles.llm.chat import ChatModel, ChatReply, Message, ToolCall
from achilles.tools.base import ToolContext, ToolResult
from achilles.tools.toolbox import Toolbox

log = logging.getLogger(__name__)


# The model names the tool it calls; a made-up name is kept this long in its step.
MAX_TOOL_NAME_CHARS = 128


def timed_out_message(limit_seconds: float) -> str:
    return f"run timed out: it exceeded its limit of {limit_seconds:g} s"


class RunJournal(Protocol):
    """This run's row; every method returns False when the row is no longer `running`."""

    def add_tokens(self, tokens: int) -> bool: ...

    def succeed(self, output: str) -> bool: ...

    def fail(self, reason: FailReason, error: str) -> bool: ...

    def record_step(self, step: Step) -> None:
        """Keep a step for the next write (never a write of its own)."""


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
    max_run_tokens: int | None = None  # the run's token cap (None: none)


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
        model_id: str = "",
        timer: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """`clock` keeps the deadline; `timer` and `wall_clock` time the steps;
        `model_id` is the model the calls ask for (a step names the one that answered
        when the server says)."""
        self._model = model
        self._model_id = model_id
        self._timer = timer
        self._wall_clock = wall_clock
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
            started, began = self._wall_clock(), self._timer()
            try:
                reply = self._model.complete(
                    messages, specs, timeout=min(self._limits.request_timeout, remaining)
                )
            except ModelCallFailed as exc:
                step = self._model_step(started, began, None, str(exc))
                cause = exc.__cause__ or exc
                self._journal.record_step(replace(step, error_type=type(cause).__name__))
                return self._fail(FailReason.ERROR, str(exc))
            self._journal.record_step(self._model_step(started, began, reply, None))

            used = reply.usage.total_tokens if reply.usage else 0
            if used:
                if not self._journal.add_tokens(used):
                    return self._result(Outcome.ROW_LOST, "token count refused")
                self._tokens += used
            if self._stop.is_set():
                return self._result(Outcome.STOPPED, "stop requested")

            if not reply.tool_calls:
                return self._finish(reply.content, reply.finish_reason)
            cap = self._limits.max_run_tokens
            if cap is not None and is_token_cap_reached(self._tokens, cap):
                # The call that reached the cap is counted (above); the tools it asks
                # for and the calls after them would spend more.
                return self._fail(FailReason.TOKEN_CAP, token_cap_message(self._tokens, cap))
            log.info(
                "iteration %d: model called %s",
                iteration,
                ", ".join(call.name for call in reply.tool_calls),
            )
            if iteration == self._limits.max_iterations:
                break  # the cap is reached; running these calls could change nothing
            messages.append(reply.as_message())
            waits: list[str] = []
            for call in reply.tool_calls:
                if self._stop.is_set():
                    return self._result(Outcome.STOPPED, "stop requested")
                result = self._call_tool(call)
                messages.append(
                    {"role": "tool", "tool_call_id": call.call_id, "content": result.content}
                )
                if result.ends_run is not None:
                    waits.append(result.ends_run)
            if waits:
                # A call waits for its owner's approval: the run ends here, saying so; a
                # later run makes the approved call (`tools/approvals.py`).
                return self._finish("\n".join(waits), "approval_requested")
        return self._fail(
            FailReason.ITERATION_CAP,
            f"the model was still calling tools after {self._limits.max_iterations} iterations",
        )

    def _call_tool(self, call: ToolCall) -> ToolResult:
        started, began = self._wall_clock(), self._timer()
        try:
            result = self._toolbox.call(call.name, call.arguments, self._ctx)
        except Exception as exc:
            # A bug in a tool: the run fails (the caller writes it); its step says which.
            step = self._tool_step(
                call, started, began, None, f"tool crashed: {type(exc).__name__}"
            )
            self._journal.record_step(replace(step, error_type=type(exc).__name__))
            raise
        self._journal.record_step(self._tool_step(call, started, began, result, result.error))
        return result

    def _model_step(
        self, started: datetime, began: float, reply: ChatReply | None, error: str | None
    ) -> Step:
        usage = None if reply is None else reply.usage
        return Step(
            kind=StepKind.MODEL_CALL,
            started_at=started,
            ended_at=self._wall_clock(),
            latency_ms=max(0.0, (self._timer() - began) * 1000),
            model=(reply.model if reply is not None else None) or self._model_id,
            input_tokens=None if usage is None else usage.prompt_tokens,
            output_tokens=None if usage is None else usage.completion_tokens,
            finish_reason=None if reply is None else reply.finish_reason,
            error=clip_step_error(error),
        )

    def _tool_step(
        self,
        call: ToolCall,
        started: datetime,
        began: float,
        result: ToolResult | None,
        error: str | None,
    ) -> Step:
        return Step(
            kind=self._toolbox.step_kind(call.name),
            started_at=started,
            ended_at=self._wall_clock(),
            latency_ms=max(0.0, (self._timer() - began) * 1000),
            tool=call.name[:MAX_TOOL_NAME_CHARS],
            status=ToolStatus.OK if error is None else ToolStatus.ERROR,
            argument_bytes=len(call.arguments.encode()),
            result_bytes=None if result is None else len(result.content.encode()),
            error=clip_step_error(error),
            argument_sha256=None if result is None else result.argument_sha256,
            call_id=call.call_id or None,
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
