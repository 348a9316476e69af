"""When traces are exported (the standard OTEL_* variables), what the operator passes to
its runs' Jobs, and the Job's context carrier (issue 21, docs/observability.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from achilles.k8s.jobs import JobTemplate, RunJobSpec, SecretKey, build_run_job
from achilles.telemetry.settings import exporter_env, tracing_enabled

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}


@pytest.mark.parametrize(
    ("environ", "enabled"),
    [
        ({}, False),
        ({"TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, False),
        (ENDPOINT, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "false"}, True),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "console"}, False),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "console, otlp"}, True),
    ],
)
def test_traces_are_exported_only_to_a_configured_otlp_endpoint(
    environ: dict[str, str], enabled: bool
) -> None:
    assert tracing_enabled(environ) is enabled


def test_the_runs_get_the_operators_exporter_settings_but_not_its_name() -> None:
    environ = {
        **ENDPOINT,
        "OTEL_EXPORTER_OTLP_TIMEOUT": "5000",
        "OTEL_SERVICE_NAME": "achilles-operator",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
        "ACHILLES_DATABASE_URL": "postgresql://operator@db/achilles",
        "TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    }
    assert exporter_env(environ) == {
        **ENDPOINT,
        "OTEL_EXPORTER_OTLP_TIMEOUT": "5000",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
    }
    assert exporter_env({**environ, "OTEL_SDK_DISABLED": "true"}) == {}


def test_credentials_and_tls_files_never_reach_a_jobs_spec() -> None:
    secrets = {
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer s3cret",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-api-key=s3cret",
        "OTEL_EXPORTER_OTLP_CERTIFICATE": "/etc/otel/ca.pem",
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": "/etc/otel/client.pem",
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": "/etc/otel/client.key",
    }
    assert exporter_env({**ENDPOINT, **secrets}) == ENDPOINT


def _job_env(traceparent: str | None) -> dict[str, Any]:
    run = RunJobSpec(
        run_id=42,
        agent_id=7,
        agent_uid=None,
        agent_namespace="team-a",
        agent_name="digest",
        trigger="scheduled",
        scheduled_for=datetime(2026, 12, 1, 9, 0, tzinfo=UTC),
        run_timeout_seconds=900,
        model_secret=None,
        traceparent=traceparent,
    )
    template = JobTemplate(
        namespace="achilles-runs",
        image="achilles-runner:1.0",
        database_secret=SecretKey("achilles-runner-database", "url"),
        extra_env=tuple(sorted(ENDPOINT.items())),
    )
    (container,) = build_run_job(run, template)["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item.get("value") for item in container["env"]}


def test_a_jobs_environment_carries_its_dispatch_span() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    env = _job_env(parent)
    assert env["TRACEPARENT"] == parent
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4318"
    assert "TRACEPARENT" not in _job_env(None)


# The operator's whole import graph (the kopf handlers and the runtime's loops, which
# open spans through `telemetry/spans.py`), its spans made as `configure` makes them,
# then the OpenTelemetry modules loaded: a fresh interpreter, so nothing else imported
# them first.
_OPERATOR_IMPORTS = """
import json, os, sys
import achilles.cli.main, achilles.cli.operator, achilles.handlers, achilles.handlers.operator
import achilles.handlers.manager
from achilles.telemetry.spans import operator_spans
spans = operator_spans(os.environ)
with spans.span("scheduler pass", {"achilles.scheduler.repair": True}) as span:
    span.set_attribute("achilles.scheduler.enqueued", 0)
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print(json.dumps({"spans": type(spans).__name__, "loaded": loaded}))
"""


def _operator_imports(environ: dict[str, str]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", _OPERATOR_IMPORTS],
        env={**env, **environ},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_with_no_otlp_endpoint_the_operator_imports_nothing_of_opentelemetry() -> None:
    """Zero cost when off, in the operator too: its spans are the no-op, and neither its
    modules nor a span opened load the SDK or the API. With an endpoint the same lines
    load them (the check sees imports)."""
    off = _operator_imports({})
    assert off == {"spans": "NoSpans", "loaded": []}
    on = _operator_imports({**ENDPOINT, "OTEL_BSP_SCHEDULE_DELAY": "60000"})
    assert on["spans"] == "OperatorSpans"
    assert "opentelemetry.sdk.trace" in on["loaded"]


# The same operator, then one MCP listing (as the catalogue's discovery makes it) of a
# port bound and not listening, so refused at once: what it loaded before and after.
_OPERATOR_LISTS_MCP = """
import json, os, socket, sys
import achilles.cli.main, achilles.cli.operator, achilles.handlers, achilles.handlers.operator
import achilles.handlers.manager
from achilles.mcp_client.client import McpEndpoint, McpUnreachable, list_tools

def loaded(root):
    return sorted(m for m in sys.modules if m.split(".")[0] == root)

before = {"mcp": loaded("mcp"), "opentelemetry": loaded("opentelemetry")}
with socket.socket() as closed:
    closed.bind(("127.0.0.1", 0))
    try:
        list_tools(McpEndpoint(f"http://127.0.0.1:{closed.getsockname()[1]}/mcp", 10.0))
        outcome = "listed"
    except McpUnreachable as exc:
        outcome = type(exc).__name__
from opentelemetry import trace
print(json.dumps({
    "before": before,
    "outcome": outcome,
    "mcp": bool(loaded("mcp")),
    "opentelemetry": loaded("opentelemetry"),
    "provider": type(trace.get_tracer_provider()).__name__,
}))
"""


def test_with_no_otlp_endpoint_only_an_mcp_listing_loads_opentelemetrys_api() -> None:
    """The MCP SDK imports OpenTelemetry's API itself, unconditionally; `mcp_client`
    imports the SDK at a process's first listing or call, so an operator that never talks
    MCP loads neither (above). One that does loads the API through the SDK, and still no
    SDK, no exporter and no tracer provider: its spans, and the SDK's, are no-ops."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", _OPERATOR_LISTS_MCP],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["before"] == {"mcp": [], "opentelemetry": []}
    assert result["outcome"] == "McpUnreachable"
    assert result["mcp"] is True
    assert "opentelemetry.trace" in result["opentelemetry"]
    assert [
        m
        for m in result["opentelemetry"]
        if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))
    ] == []
    assert result["provider"] == "ProxyTracerProvider"
