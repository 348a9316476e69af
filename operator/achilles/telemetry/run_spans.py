"""One run's trace, after the OpenTelemetry GenAI semantic conventions.

- `invoke_agent <agent>`, the root (its parent: the operator's dispatch span when the
  Job's environment carries one): from the claim to the run's end, with the run's
  outcome and its tokens in all;
- `chat <model>` per model call: provider, requested and answering model, tokens in
  and out, finish reason, `error.type` when it failed;
- `execute_tool <tool>` per tool call (the inbox's ask included): the tool, the call's
  id, `error.type` when the model got an error back.

Made from the run's steps (`domain/run_trace.py`) as the runner records them, with the
steps' own start and end times, so the spans and the journal's steps are the same
events. Never a prompt, a document, a tool's arguments or result: sizes at most, as the
journal. Past the journal's cap (`MAX_STEPS_PER_RUN`) no more spans are made either.
"""

from __future__ import annotations

import threading
from datetime import datetime

from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.util.types import AttributeValue

from achilles.domain.run_spec import ModelEndpoint, RunSpec
from achilles.domain.run_trace import Step, StepKind, ToolStatus, endpoint_host
from achilles.domain.runs import RunState
from achilles.telemetry.provider import Tracing

# The API the runner's client speaks (an OpenAI-compatible endpoint may serve any
# provider's model; the conventions ask for the instrumentation's best knowledge).
PROVIDER = "openai"
# What a failed tool call's `error.type` is when the tool did not crash: the model got
# an error result (bad arguments, a refusal).
TOOL_ERROR = "tool_error"


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


def _server(base_url: str) -> dict[str, AttributeValue]:
    host, _, port = endpoint_host(base_url).rpartition(":")
    if not host or not port.isdigit():
        return {"server.address": endpoint_host(base_url)}
    return {"server.address": host.strip("[]"), "server.port": int(port)}


class RunSpans:
    """The spans of one run; `runner/steps.py` hands it each step and the run's end."""

    def __init__(
        self,
        tracing: Tracing,
        spec: RunSpec,
        endpoint: ModelEndpoint,
        *,
        parent: Context | None,
        started_at: datetime,
    ) -> None:
        self._tracing = tracing
        self._endpoint = endpoint
        self._model_attributes: dict[str, AttributeValue] = {
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.system": PROVIDER,  # the name before gen_ai.provider.name, still read
            "gen_ai.request.model": endpoint.provider_model,
            **_server(endpoint.base_url),
        }
        self._lock = threading.Lock()
        self._input_tokens = 0
        self._output_tokens = 0
        self._root = tracing.tracer.start_span(
            f"invoke_agent {spec.agent_name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            start_time=_ns(started_at),
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": spec.agent_name,
                "gen_ai.agent.id": str(spec.agent_id),
                **self._model_attributes,
                "achilles.run.id": spec.run_id,
                "achilles.run.trigger": str(spec.trigger),
                "achilles.agent.id": spec.agent_id,
                "achilles.model.name": endpoint.name,
            },
        )
        self._context = set_span_in_context(self._root)

    @property
    def trace_id(self) -> str:
        return format(self._root.get_span_context().trace_id, "032x")

    def on_step(self, step: Step) -> None:
        if step.kind is StepKind.MODEL_CALL:
            self._chat(step)
        elif step.kind in (StepKind.TOOL_CALL, StepKind.INBOX_ASK):
            self._tool(step)
        elif step.kind is StepKind.TRUNCATED:
            self._root.set_attribute("achilles.run.steps_truncated", True)

    def on_end(self, state: RunState, reason: str | None) -> None:
        """The run's terminal write went in: its state and, failed, its reason."""
        self._root.set_attribute("achilles.run.state", str(state))
        if reason:
            self._root.set_attribute("achilles.run.reason", reason)
        if state is RunState.FAILED:
            self._root.set_attribute("error.type", reason or "error")
            self._root.set_status(Status(StatusCode.ERROR, reason))

    def close(self, timeout: float) -> bool:
        """End the root span and export what is left, within `timeout` seconds."""
        with self._lock:
            self._root.set_attribute("gen_ai.usage.input_tokens", self._input_tokens)
            self._root.set_attribute("gen_ai.usage.output_tokens", self._output_tokens)
        self._root.end()
        return self._tracing.close(timeout)

    def _chat(self, step: Step) -> None:
        model = step.model or self._endpoint.provider_model
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            **self._model_attributes,
            "gen_ai.response.model": model,
        }
        if step.input_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = step.input_tokens
        if step.output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = step.output_tokens
        if step.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = [step.finish_reason]
        if step.error is not None:
            attributes["error.type"] = step.error_type or "_OTHER"
        with self._lock:
            self._input_tokens += step.input_tokens or 0
            self._output_tokens += step.output_tokens or 0
        self._child(f"chat {self._endpoint.provider_model}", SpanKind.CLIENT, step, attributes)

    def _tool(self, step: Step) -> None:
        tool = step.tool or "unknown"
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.type": "function",
        }
        if step.call_id:
            attributes["gen_ai.tool.call.id"] = step.call_id
        if step.kind is StepKind.INBOX_ASK:
            attributes["achilles.step.kind"] = str(step.kind)
        if step.status is ToolStatus.ERROR:
            attributes["error.type"] = step.error_type or TOOL_ERROR
        self._child(f"execute_tool {tool}", SpanKind.INTERNAL, step, attributes)

    def _child(
        self, name: str, kind: SpanKind, step: Step, attributes: dict[str, AttributeValue]
    ) -> None:
        span = self._tracing.tracer.start_span(
            name,
            context=self._context,
            kind=kind,
            start_time=_ns(step.started_at),
            attributes=attributes,
        )
        if "error.type" in attributes:
            span.set_status(Status(StatusCode.ERROR, str(attributes["error.type"])))
        span.end(end_time=_ns(step.ended_at))
