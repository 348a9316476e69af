"""OpenTelemetry traces of the operator and the runner (issue 21; docs/observability.md).

Off unless an OTLP endpoint is configured by the standard `OTEL_*` variables
(`settings.py`, which imports nothing of OpenTelemetry): a process without one never
imports the SDK or the exporter. `provider.py` starts the SDK (OTLP over HTTP),
`run_spans.py` turns a run's steps into GenAI spans, `spans.py` is the operator's
span port (a no-op when off) and its OpenTelemetry implementation lives in
`operator_spans.py`.
"""
