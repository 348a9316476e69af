"""The operator's spans, exported (OTLP over HTTP): `spans.Spans` on OpenTelemetry.

The operator's threads open spans for their passes and hand a dispatch span to the
thread that creates its Job, so a span's parent is always given, never taken from the
thread's current context: a span without one starts a trace of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry.context import Context
from opentelemetry.trace import Span as OtelSpan
from opentelemetry.trace import set_span_in_context, use_span

from achilles.telemetry.provider import Tracing, traceparent
from achilles.telemetry.settings import OPERATOR_SERVICE
from achilles.telemetry.spans import Attribute, Span


class _Span:
    def __init__(self, span: OtelSpan) -> None:
        self.otel = span

    def set_attribute(self, key: str, value: Attribute) -> None:
        self.otel.set_attribute(key, value)

    @property
    def traceparent(self) -> str | None:
        return traceparent(set_span_in_context(self.otel))


class OperatorSpans:
    def __init__(self, service_name: str = OPERATOR_SERVICE) -> None:
        self._tracing = Tracing(service_name)

    @contextmanager
    def span(
        self,
        name: str,
        attributes: Mapping[str, Attribute] | None = None,
        *,
        parent: Span | None = None,
    ) -> Iterator[Span]:
        context = set_span_in_context(parent.otel) if isinstance(parent, _Span) else Context()
        span = self._tracing.tracer.start_span(name, context=context, attributes=attributes)
        with use_span(span, end_on_exit=True, record_exception=True):
            yield _Span(span)

    def close(self, timeout: float) -> bool:
        return self._tracing.close(timeout)
