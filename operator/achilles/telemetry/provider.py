"""The OpenTelemetry SDK of one process: a tracer exporting OTLP over HTTP in batches.

Imported only when `settings.tracing_enabled` says so. The provider is the process'
own, not OpenTelemetry's global one: nothing else in the process (a library's
auto-instrumentation) starts exporting because we did, and a test may start several.
The exporter reads the standard `OTEL_EXPORTER_OTLP_*` settings itself.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from achilles.domain.trace_context import TRACEPARENT_ENV, TRACESTATE_ENV

INSTRUMENTATION = "achilles"


class Tracing:
    """One process' tracer provider and its exporter."""

    def __init__(self, service_name: str) -> None:
        self.provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer: Tracer = self.provider.get_tracer(INSTRUMENTATION)

    def close(self, timeout: float) -> bool:
        """Export what is left and stop, waiting at most `timeout` seconds (the
        exporter's retries against an unreachable collector would wait for longer):
        True when it finished in time. A shutdown still running is abandoned (a daemon
        thread) and ends with the process."""
        done = threading.Thread(target=self.provider.shutdown, name="otel-flush", daemon=True)
        done.start()
        done.join(timeout)
        return not done.is_alive()


def parent_from_env(environ: Mapping[str, str]) -> Context | None:
    """The context a process' environment carries (`TRACEPARENT`, `TRACESTATE`), or None
    when it carries none or a malformed one."""
    carrier = {"traceparent": environ.get(TRACEPARENT_ENV, "")}
    if not carrier["traceparent"]:
        return None
    if environ.get(TRACESTATE_ENV):
        carrier["tracestate"] = environ[TRACESTATE_ENV]
    context = TraceContextTextMapPropagator().extract(carrier)
    return context if context else None


def traceparent(context: Context) -> str | None:
    """The W3C `traceparent` of the span active in `context`."""
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context)
    return carrier.get("traceparent")
