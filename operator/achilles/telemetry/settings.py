"""Whether traces are exported, from the standard OpenTelemetry environment variables.

Light on purpose (the standard library only): the runner and the operator ask this
before anything of OpenTelemetry is imported, so with tracing off the SDK and the
exporter cost neither import time nor memory.

On when an OTLP endpoint is set (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
`OTEL_EXPORTER_OTLP_ENDPOINT`), unless `OTEL_SDK_DISABLED=true` or
`OTEL_TRACES_EXPORTER` names no `otlp` exporter (e.g. `none`). The exporter itself reads
the other `OTEL_EXPORTER_OTLP_*` settings (headers, timeout, certificates, compression).
"""

from __future__ import annotations

from collections.abc import Mapping

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
SDK_DISABLED_ENV = "OTEL_SDK_DISABLED"
TRACES_EXPORTER_ENV = "OTEL_TRACES_EXPORTER"
SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"

OPERATOR_SERVICE = "achilles-operator"
RUNNER_SERVICE = "achilles-runner"


def tracing_enabled(environ: Mapping[str, str]) -> bool:
    """Whether this process exports traces (see the module's note)."""
    if environ.get(SDK_DISABLED_ENV, "").strip().lower() == "true":
        return False
    exporters = environ.get(TRACES_EXPORTER_ENV, "otlp").strip().lower() or "otlp"
    if "otlp" not in {name.strip() for name in exporters.split(",")}:
        return False
    return bool(
        environ.get(TRACES_ENDPOINT_ENV, "").strip() or environ.get(ENDPOINT_ENV, "").strip()
    )


# Never copied into a Job: headers carry credentials (a Job's spec is readable by whoever
# may read Jobs in the runs namespace, and shows in `kubectl get job -o yaml`), and the
# TLS settings name files on the operator's filesystem, absent from a run's pod.
_NOT_FOR_RUNS = ("_HEADERS", "_CERTIFICATE", "_CLIENT_KEY")


def exporter_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The `OTEL_*` settings a run's Job gets from the operator's environment, so its
    runner exports where the operator does: all of them but the service's name (each
    process names itself), headers and TLS files (see `_NOT_FOR_RUNS`)."""
    if not tracing_enabled(environ):
        return {}
    return {
        name: value
        for name, value in environ.items()
        if name.startswith("OTEL_")
        and name != SERVICE_NAME_ENV
        and not name.endswith(_NOT_FOR_RUNS)
    }
