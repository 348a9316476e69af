"""How a trace crosses from the operator to a run's process: its Job's environment.

The OpenTelemetry convention for a context carried by environment variables (W3C Trace
Context): the operator puts its dispatch span's `traceparent` on the run's Job, the
runner's trace continues it (`telemetry/provider.py` reads it).
"""

from __future__ import annotations

TRACEPARENT_ENV = "TRACEPARENT"
TRACESTATE_ENV = "TRACESTATE"
